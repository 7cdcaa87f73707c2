"""The aiohttp transport: one pooled session, HTTP/1.1 keep-alive, a timeout per request.

aiohttp's exceptions stop here: every network problem becomes a
:class:`~wayline.delivery.transports.base.Failure` with a reason a customer can read.

Every connection goes only to an address the operator's URL policy admits
(:class:`~wayline.registry.urls.AddressPolicy`, the one that checked the URL when the
endpoint was created): the session's resolver checks each address a host name resolves
to, and the connector connects to exactly those addresses, so a DNS answer that changed
since (rebinding) is refused too; a URL whose host is an address literal never reaches
the resolver and is checked before the request. Redirects are never followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from types import TracebackType

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from wayline.delivery.transports.base import Failure, FailureKind, HttpSettings, Request, Response, Result
from wayline.registry.urls import AddressPolicy


class _AddressRefused(OSError):
    """The URL policy refused an address a host resolved to; the message says why."""


class _PolicyResolver(AbstractResolver):
    """aiohttp's resolver, refusing a host if any address it resolves to is not admitted.

    Refusing the whole host rather than dropping the bad addresses matches the check at
    create time, which refuses such a URL outright.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = aiohttp.DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            refusal = self._policy.refusal(host, ipaddress.ip_address(result["host"]))
            if refusal is not None:
                raise _AddressRefused(refusal)
        return results

    async def close(self) -> None:
        await self._inner.close()


class AiohttpTransport:
    """Use as ``async with AiohttpTransport() as transport``; one per event loop."""

    def __init__(self, settings: HttpSettings = HttpSettings()) -> None:
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AiohttpTransport:
        connector = aiohttp.TCPConnector(
            limit=self._settings.max_connections,
            keepalive_timeout=self._settings.keepalive_s,
            ttl_dns_cache=self._settings.dns_cache_s,
            resolver=_PolicyResolver(self._settings.allowed),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"user-agent": self._settings.user_agent},
            # One session serves every customer: a cookie set by one endpoint must
            # never travel to another.
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, request: Request) -> Result:
        if self._session is None:
            raise RuntimeError("AiohttpTransport.send outside 'async with'")
        endpoint = request.endpoint
        timeout = aiohttp.ClientTimeout(
            total=endpoint.timeout_s,
            sock_connect=min(self._settings.connect_timeout_s, endpoint.timeout_s),
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        refusal = _literal_refusal(endpoint.url, self._settings.allowed)
        if refusal is not None:
            return Failure(FailureKind.ADDRESS_REFUSED, refusal)
        try:
            async with self._session.post(
                endpoint.url,
                data=request.body,
                headers=request.headers,
                timeout=timeout,
                # A redirect is a failure: following it would hide a stale endpoint URL,
                # and would reach a URL the policy never checked.
                allow_redirects=False,
            ) as response:
                body = await _read_capped(response, self._settings.max_response_bytes)
                return Response(
                    status=response.status,
                    headers={name.lower(): value for name, value in response.headers.items()},
                    body=body,
                    elapsed_s=loop.time() - started,
                )
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
            return Failure(FailureKind.INVALID_REQUEST, f"not an HTTP(S) URL: {exc}", loop.time() - started)
        except TimeoutError:
            return Failure(
                FailureKind.TIMEOUT, f"no response within {endpoint.timeout_s:g} s", loop.time() - started
            )
        except (aiohttp.ClientError, OSError) as exc:
            refused = _refused_in(exc)
            if refused is not None:
                return Failure(FailureKind.ADDRESS_REFUSED, str(refused), loop.time() - started)
            return Failure(FailureKind.CONNECTION, _describe(exc), loop.time() - started)


def _literal_refusal(url: str, policy: AddressPolicy) -> str | None:
    """Why the policy refuses the URL's host, when that host is an address (aiohttp resolves no literal)."""
    try:
        host = URL(url).host
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return None  # a host name, for the resolver; or no valid URL, which aiohttp reports
    return policy.refusal(host or "", address)


def _refused_in(exc: BaseException) -> _AddressRefused | None:
    """The resolver's refusal, which aiohttp wraps in its own connection error."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, _AddressRefused):
        cause = cause.__cause__ or getattr(cause, "os_error", None)
    return cause


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of the body: enough for an error message or a token."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = await response.content.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = ["AiohttpTransport"]
