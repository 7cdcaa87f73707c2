"""The pyreqwest transport: Rust's reqwest/hyper under the same guarantees as the aiohttp one.

pyreqwest spends less CPU per request than aiohttp (see
docs/benchmarks.md#delivery-http-clients-issue-4-groundwork--2026-11-22), but it has no
resolver hook, only static host -> address overrides fixed when a client is built. So the
address policy is kept by resolving, checking and then pinning: this transport resolves a
host itself, refuses it if any address is not admitted
(:class:`~wayline.registry.urls.AddressPolicy`, the same check as at create time), and
sends through a client whose only way to that host is the checked address.
reqwest never resolves the name again, so a DNS answer that changes in between
(rebinding) cannot pass; the URL keeps its host name, so the Host header and TLS SNI
and certificate checks are the endpoint's own. A client is kept per (host, address), and
with it its pool of keep-alive connections, for as long as the host's checked answer
holds (``HttpSettings.dns_cache_s``). Address literals go through the same check, since
resolving one only reads it.

A host with several admitted addresses is tried in the resolver's order, falling back to
the next only when the connection could not be made, so no request is sent twice.
Redirects are never followed and no cookies are kept, as with aiohttp.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType

from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import ConnectError, PyreqwestError, RequestTimeoutError
from pyreqwest.response import ResponseBodyReader
from yarl import URL

from wayline.delivery.transports.base import Failure, FailureKind, HttpSettings, Request, Response, Result

_SCHEMES = frozenset({"http", "https"})


class _Refused(Exception):
    """The policy refused an address the host resolved to; the message says why."""


@dataclass(frozen=True, slots=True)
class _Pin:
    """A host's checked addresses, in the resolver's order, and until when they hold."""

    addresses: tuple[str, ...]
    expires_at: float


class ReqwestTransport:
    """Use as ``async with ReqwestTransport() as transport``; one per event loop."""

    def __init__(self, settings: HttpSettings = HttpSettings()) -> None:
        self._settings = settings
        self._pins: dict[str, _Pin] = {}
        self._clients: dict[tuple[str, str], Client] = {}
        self._open = False

    async def __aenter__(self) -> ReqwestTransport:
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._open = False
        clients, self._clients = list(self._clients.values()), {}
        self._pins.clear()
        for client in clients:
            await client.close()

    async def send(self, request: Request) -> Result:
        if not self._open:
            raise RuntimeError("ReqwestTransport.send outside 'async with'")
        endpoint = request.endpoint
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            url = URL(endpoint.url)
        except ValueError as exc:
            return Failure(FailureKind.INVALID_REQUEST, f"not an HTTP(S) URL: {exc}")
        if url.scheme not in _SCHEMES or not url.host:
            return Failure(FailureKind.INVALID_REQUEST, f"not an HTTP(S) URL: {endpoint.url}")
        try:
            addresses = await self._checked_addresses(url.host, url.port or 0)
        except _Refused as refused:
            return Failure(FailureKind.ADDRESS_REFUSED, str(refused), loop.time() - started)
        except OSError as exc:
            return Failure(FailureKind.CONNECTION, f"{url.host}: {exc}", loop.time() - started)
        for index, address in enumerate(addresses):
            remaining = endpoint.timeout_s - (loop.time() - started)
            if remaining <= 0:
                break
            try:
                return await self._post(self._client(url.host, address), request, remaining, started)
            except ConnectError as exc:
                # Nothing was sent: the next admitted address may take it.
                if index == len(addresses) - 1:
                    return Failure(FailureKind.CONNECTION, _describe(exc), loop.time() - started)
            except RequestTimeoutError:
                break
            except ValueError as exc:  # pyreqwest's BuilderError too: a URL reqwest cannot send
                return Failure(FailureKind.INVALID_REQUEST, _describe(exc), loop.time() - started)
            except PyreqwestError as exc:
                return Failure(FailureKind.CONNECTION, _describe(exc), loop.time() - started)
        return Failure(FailureKind.TIMEOUT, f"no response within {endpoint.timeout_s:g} s", loop.time() - started)

    async def _post(self, client: Client, request: Request, timeout_s: float, started: float) -> Response:
        limit = self._settings.max_response_bytes
        builder = (
            client.post(request.endpoint.url)
            .headers(request.headers)
            .body_bytes(request.body)
            .timeout(timedelta(seconds=timeout_s))
            .streamed_read_buffer_limit(max(limit, 1))
        )
        async with builder.build_streamed() as response:
            # A HeaderMap's names are lower-case already (the http crate's HeaderName).
            headers = dict(response.headers.items())
            body = await _read_capped(response.body_reader, min(limit, _declared_length(headers)))
            return Response(
                status=response.status,
                headers=headers,
                body=body,
                elapsed_s=asyncio.get_running_loop().time() - started,
            )

    async def _checked_addresses(self, host: str, port: int) -> tuple[str, ...]:
        loop = asyncio.get_running_loop()
        pin = self._pins.get(host)
        if pin is not None and pin.expires_at > loop.time():
            return pin.addresses
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            refusal = self._settings.allowed.refusal(host, ipaddress.ip_address(address))
            if refusal is not None:
                raise _Refused(refusal)
        if pin is not None:
            # Clients pinned to addresses the host no longer has go with their pools.
            for gone in set(pin.addresses) - set(addresses):
                self._clients.pop((host, gone), None)
        self._pins[host] = _Pin(addresses, loop.time() + self._settings.dns_cache_s)
        return addresses

    def _client(self, host: str, address: str) -> Client:
        client = self._clients.get((host, address))
        if client is None:
            client = self._clients[(host, address)] = self._build(host, address)
        return client

    def _build(self, host: str, address: str) -> Client:
        settings = self._settings
        builder = (
            ClientBuilder()
            # A redirect is a failure: following it would hide a stale endpoint URL,
            # and would reach a URL the policy never checked.
            .follow_redirects(False)
            # One client may serve several customers on one host: no cookie travels.
            .default_cookie_store(False)
            .no_proxy()
            .user_agent(settings.user_agent)
            .connect_timeout(timedelta(seconds=settings.connect_timeout_s))
            .pool_idle_timeout(timedelta(seconds=settings.keepalive_s))
            .max_connections(settings.max_connections or None)
        )
        # The port is the URL's; reqwest ignores the one given here.
        return builder.resolve(host, address, 0).build()


def _declared_length(headers: dict[str, str]) -> int:
    """The body's ``content-length``, or no bound when it has none (chunked)."""
    length = headers.get("content-length", "")
    return int(length) if length.isascii() and length.isdigit() else sys.maxsize


async def _read_capped(reader: ResponseBodyReader, limit: int) -> bytes:
    """At most ``limit`` bytes of the body: enough for an error message or a token. A body
    whose length was declared is read up to it and no further: one read less per request
    than reading until the stream says it ended (hyper keeps the connection alive as soon
    as the declared length is read, and refuses a body shorter than declared)."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = await reader.read(remaining)
        if not chunk:
            break
        chunks.append(bytes(chunk))
        remaining -= len(chunk)
    return b"".join(chunks)


def _describe(exc: Exception) -> str:
    """The innermost causes read best ("Connection refused (os error 111)")."""
    details = getattr(exc, "details", None) or {}
    causes = [cause["message"] for cause in details.get("causes") or []]
    return f"{type(exc).__name__}: {'; '.join(causes[-2:]) if causes else exc}"


__all__ = ["ReqwestTransport"]
