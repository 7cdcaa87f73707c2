"""The aiohttp transport: one pooled session, HTTP/1.1 keep-alive, a timeout per request.

aiohttp's exceptions stop here: every network problem becomes a
:class:`~wayline.delivery.transport.Failure` with a reason a customer can read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType

import aiohttp

from wayline.delivery.transport import Failure, FailureKind, Request, Response, Result

DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_KEEPALIVE_S = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
DEFAULT_DNS_CACHE_S = 300
USER_AGENT = "Wayline-Webhooks/1"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """``max_connections`` of 0 leaves the pool uncapped on purpose: the per-endpoint
    in-flight limits bound it, and a shared cap would let hanging endpoints hold every
    connection and starve the healthy ones."""

    max_connections: int = 0
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    dns_cache_s: int = DEFAULT_DNS_CACHE_S
    user_agent: str = USER_AGENT


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
        try:
            async with self._session.post(
                endpoint.url,
                data=request.body,
                headers=request.headers,
                timeout=timeout,
                # A redirect is a failure: following it would hide a stale endpoint URL.
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
            return Failure(FailureKind.CONNECTION, _describe(exc), loop.time() - started)


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


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_DNS_CACHE_S",
    "DEFAULT_KEEPALIVE_S",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "USER_AGENT",
    "AiohttpTransport",
    "HttpSettings",
]
