"""Endpoint authentication on top of the signature: Basic, Bearer, OAuth2 client credentials.

Each kind gives the headers for a request to its endpoint (the
:class:`~wayline.delivery.transports.base.Auth` interface). One object serves every request
to an endpoint, so the OAuth2 token is fetched once and shared until shortly before
it expires. Token fetches go through a :class:`~wayline.delivery.transports.base.Transport`,
so they obey the same timeouts and can be tested against a real local token server.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote_plus, urlencode

import orjson

from wayline.core.errors import RejectedInput, RetryLater
from wayline.delivery.transports.base import Endpoint, Failure, Request, Transport

AUTHORIZATION = "authorization"
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
# Refetch this long before the token expires, so no request leaves with a token
# that dies on the way.
DEFAULT_REFRESH_MARGIN_S = 30.0
# RFC 6749 makes expires_in optional; without it, assume a short life.
DEFAULT_TOKEN_LIFETIME_S = 300.0
DEFAULT_TOKEN_TIMEOUT_S = 10.0
# After a failed fetch, requests fail fast for this long instead of each one
# queueing for its own fetch from a token server that is down.
DEFAULT_FETCH_BACKOFF_S = 5.0


class TokenError(RetryLater):
    """The OAuth2 token endpoint gave no usable token; the delivery is retried later."""


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


@dataclass(frozen=True, slots=True)
class BasicAuth:
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if ":" in self.username:
            raise RejectedInput("a Basic auth username may not contain ':'")

    async def headers(self) -> Mapping[str, str]:
        return {AUTHORIZATION: _basic(self.username, self.password)}


@dataclass(frozen=True, slots=True)
class BearerAuth:
    token: str = field(repr=False)

    async def headers(self) -> Mapping[str, str]:
        return {AUTHORIZATION: f"Bearer {self.token}"}


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """An endpoint's OAuth2 client-credentials grant (RFC 6749 §4.4)."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    refresh_margin_s: float = DEFAULT_REFRESH_MARGIN_S
    default_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S
    timeout_s: float = DEFAULT_TOKEN_TIMEOUT_S
    fetch_backoff_s: float = DEFAULT_FETCH_BACKOFF_S


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    refresh_at: float


class OAuth2ClientCredentials:
    """Bearer headers with a token fetched by client credentials and cached until near expiry."""

    def __init__(
        self,
        credentials: ClientCredentials,
        transport: Transport,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._credentials = credentials
        self._transport = transport
        self._clock = clock
        self._token: _Token | None = None
        self._failed: tuple[float, TokenError] | None = None
        # Many requests start together; the lock makes them share one fetch.
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"OAuth2ClientCredentials({self._credentials!r})"

    async def headers(self) -> Mapping[str, str]:
        return {AUTHORIZATION: f"Bearer {await self.token()}"}

    async def token(self) -> str:
        cached = self._cached()
        if cached is not None:
            return cached
        async with self._lock:
            cached = self._cached()
            if cached is not None:
                return cached
            if self._failed is not None and self._clock() < self._failed[0]:
                raise self._failed[1]
            try:
                value, lifetime = await self._fetch()
            except TokenError as exc:
                self._failed = (self._clock() + self._credentials.fetch_backoff_s, exc)
                raise
            self._failed = None
            margin = min(self._credentials.refresh_margin_s, lifetime / 2)
            self._token = _Token(value, self._clock() + lifetime - margin)
            return value

    def _cached(self) -> str | None:
        token = self._token
        return token.value if token is not None and self._clock() < token.refresh_at else None

    async def _fetch(self) -> tuple[str, float]:
        c = self._credentials
        form = {"grant_type": "client_credentials"}
        if c.scope:
            form["scope"] = c.scope
        # RFC 6749 §2.3.1: the id and secret are form-encoded before Basic encoding.
        headers = {
            AUTHORIZATION: _basic(quote_plus(c.client_id), quote_plus(c.client_secret)),
            "content-type": FORM_CONTENT_TYPE,
            "accept": "application/json",
        }
        endpoint = Endpoint(id=f"oauth2:{c.token_url}", url=c.token_url, timeout_s=c.timeout_s)
        result = await self._transport.send(Request(endpoint, urlencode(form).encode("ascii"), headers))
        where = f"token endpoint {c.token_url}"
        if isinstance(result, Failure):
            raise TokenError(f"{where}: {result.detail}")
        try:
            answer = orjson.loads(result.body)
        except orjson.JSONDecodeError as exc:
            raise TokenError(f"{where} answered {result.status} with a body that is not JSON") from exc
        if not isinstance(answer, dict):
            raise TokenError(f"{where} answered {result.status} with JSON that is not an object")
        if not result.ok:
            error = answer.get("error_description") or answer.get("error") or "no reason given"
            raise TokenError(f"{where} refused the client credentials ({result.status}): {error}")
        value = answer.get("access_token")
        if not isinstance(value, str) or not value:
            raise TokenError(f"{where} answered without an access_token")
        if str(answer.get("token_type", "")).lower() != "bearer":
            raise TokenError(f"{where} issued a {answer.get('token_type')!r} token; only bearer tokens are supported")
        lifetime = answer.get("expires_in", c.default_lifetime_s)
        if isinstance(lifetime, str) and lifetime.isdigit():
            # Some servers send the number as a string.
            lifetime = int(lifetime)
        if not isinstance(lifetime, int | float) or isinstance(lifetime, bool) or lifetime <= 0:
            raise TokenError(f"{where} answered with an invalid expires_in: {lifetime!r}")
        return value, float(lifetime)


__all__ = [
    "AUTHORIZATION",
    "DEFAULT_FETCH_BACKOFF_S",
    "DEFAULT_REFRESH_MARGIN_S",
    "DEFAULT_TOKEN_LIFETIME_S",
    "DEFAULT_TOKEN_TIMEOUT_S",
    "FORM_CONTENT_TYPE",
    "BasicAuth",
    "BearerAuth",
    "ClientCredentials",
    "OAuth2ClientCredentials",
    "TokenError",
]
