"""Endpoint URLs: only http(s), and never an internal address unless the operator allows it.

A webhook URL is chosen by a customer and fetched by Wayline from inside the operator's
network, so a URL that resolves to a private, loopback, link-local or otherwise
non-public address would let a customer probe that network (SSRF). Such URLs are
refused unless their host name or address range is on the operator's allow-list.
The delivery path checks again at send time, since DNS answers can change.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from wayline.core.errors import RejectedInput

Resolver = Callable[[str], list[str]]


def resolve(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise RejectedInput(f"url: host {host!r} does not resolve ({exc.strerror})") from exc
    return sorted({str(info[4][0]) for info in infos})


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not address.is_multicast


def check_endpoint_url(url: str, allow_list: Sequence[str], resolver: Resolver = resolve) -> str:
    """Return the URL if Wayline may deliver to it; raise RejectedInput saying why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RejectedInput(f"url: scheme must be http or https, not {parts.scheme or 'missing'!r}")
    host = parts.hostname
    if not host:
        raise RejectedInput("url: no host")
    if parts.username or parts.password:
        raise RejectedInput("url: credentials in the URL are not allowed; use the endpoint's auth settings")
    try:
        parts.port
    except ValueError as exc:
        raise RejectedInput(f"url: {exc}") from exc
    if host.lower() in {entry.lower() for entry in allow_list}:
        return url
    networks = []
    for entry in allow_list:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue  # a host name, compared above
    for text in resolver(host):
        address = ipaddress.ip_address(text)
        if _is_public(address) or any(address in network for network in networks):
            continue
        raise RejectedInput(
            f"url: {host} resolves to {address}, a private, loopback or link-local address; "
            "an operator must add it to registry.url_allow_list"
        )
    return url


__all__ = ["Resolver", "check_endpoint_url", "resolve"]
