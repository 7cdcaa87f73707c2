"""Endpoint URLs: only http(s), and never an internal address unless the operator allows it.

A webhook URL is chosen by a customer and fetched by Wayline from inside the operator's
network, so a URL that resolves to a private, loopback, link-local or otherwise
non-public address would let a customer probe that network (SSRF). Such URLs are
refused unless their host name or address range is on the operator's allow-list.

The same :class:`AddressPolicy` decides twice: here, when an endpoint is created or
changed, and in the delivery transports at connect time (``wayline.delivery.transports``),
since DNS answers can change (rebinding) and the allow-list may have been narrowed since
the endpoint was created.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from wayline.core.errors import RejectedInput

Resolver = Callable[[str], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# RFC 6052's well-known NAT64 prefix: a translator in the operator's network would
# connect to the IPv4 address in the last 32 bits, which Python calls global whatever it is.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def resolve(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise RejectedInput(f"url: host {host!r} does not resolve ({exc.strerror})") from exc
    return sorted({str(info[4][0]) for info in infos})


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through mapping, NAT64 or 6to4, if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.sixtofour


def non_public(address: IPAddress) -> str | None:
    """What kind of non-public address ``address`` is (``"loopback"``, …); ``None`` for a public unicast one.

    An IPv6 form that embeds an IPv4 address is judged by that IPv4 address.
    """
    embedded = embedded_ipv4(address)
    if embedded is not None:
        reason = non_public(embedded)
        return None if reason is None else f"{reason}: it embeds {embedded}"
    kinds = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("not globally routable", not address.is_global),
    )
    return next((kind for kind, matches in kinds if matches), None)


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """The operator's allow-list, parsed once: host names (exact, any case) and address ranges."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, allow_list: Iterable[str]) -> AddressPolicy:
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in allow_list:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower())
        return cls(frozenset(hosts), tuple(networks))

    def admits_host(self, host: str) -> bool:
        """Whether the operator allowed ``host`` by name, whatever it resolves to."""
        return host.lower() in self.hosts

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why Wayline may not connect to ``host`` at ``address``, in words for the attempt log; ``None`` if it may."""
        if self.admits_host(host):
            return None
        reason = non_public(address)
        if reason is None:
            return None
        # A range admits only addresses written in its own version: an IPv6 form embedding
        # an admitted IPv4 address goes through a translator or tunnel, somewhere else.
        # (Versions are compared first: ipaddress answers mixed-version membership wrongly.)
        if any(address.version == network.version and address in network for network in self.networks):
            return None
        named = str(address) if host == str(address) else f"{host} resolves to {address}, which"
        return f"{named} is not a public address ({reason}); an operator must add it to registry.url_allow_list"


def check_endpoint_url(url: str, allow_list: Sequence[str], resolver: Resolver = resolve) -> str:
    """Return the URL if Wayline may deliver to it; raise RejectedInput saying why not."""
    # urlsplit silently drops tab, CR and LF, so what was checked would not be what is stored.
    control = next((char for char in url if ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F), None)
    if control is not None:
        raise RejectedInput(f"url: control character {control!r} is not allowed; percent-encode it")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RejectedInput(f"url: scheme must be http or https, not {parts.scheme or 'missing'!r}")
    host = parts.hostname
    if not host:
        raise RejectedInput("url: no host")
    if parts.username or parts.password:
        raise RejectedInput("url: credentials in the URL are not allowed; use the endpoint's auth settings")
    try:
        _ = parts.port  # read for its check: a port that is not a number from 0 to 65535 raises ValueError
    except ValueError as exc:
        raise RejectedInput(f"url: {exc}") from exc
    policy = AddressPolicy.of(allow_list)
    if policy.admits_host(host):
        return url
    for text in resolver(host):
        refusal = policy.refusal(host, ipaddress.ip_address(text))
        if refusal is not None:
            raise RejectedInput(f"url: {refusal}")
    return url


__all__ = ["AddressPolicy", "IPAddress", "Resolver", "check_endpoint_url", "embedded_ipv4", "non_public", "resolve"]
