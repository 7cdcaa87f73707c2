"""The transport interface: what it takes to send one HTTP request, what comes back, and the
settings every HTTP transport takes.

Everything above this interface (signing, retry policy, the dispatcher, OAuth2) works
on these plain values, so it can be tested with any transport. The implementations live
beside this module, each importing only it: ``pyreqwest`` (the default), ``aiohttp`` and
``memory`` (for tests); ``factory.transport_for`` picks one by ``delivery.http_client``. A
transport never raises for a network problem: timeouts and connection errors come back
as a :class:`Failure` value, because for a webhook sender they are ordinary outcomes that
the retry policy classifies, not exceptional control flow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from wayline.core.errors import RejectedInput
from wayline.registry.urls import AddressPolicy

# The Standard Webhooks spec recommends giving receivers 15-30 s.
DEFAULT_TIMEOUT_S = 15.0
DEFAULT_MAX_IN_FLIGHT = 16
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# Longer than a pause in an endpoint's traffic that is not its own: with 30 s real-time
# matching batches, each batch boundary sent the sender processes a burst, which found the
# connections of the last burst just expired and opened new ones at every boundary (see
# docs/benchmarks.md#new-tcp-connections-per-endpoint-over-5-minutes). reqwest's and Go's own
# default; a server that closes sooner is seen closing and its connection dropped.
DEFAULT_KEEPALIVE_S = 90.0
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
DEFAULT_DNS_CACHE_S = 300
USER_AGENT = "Wayline-Webhooks/1"


class Auth(Protocol):
    """Headers that authenticate a request to one endpoint (see ``wayline.delivery.auth``)."""

    async def headers(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class EndpointLimits:
    """How hard Wayline may push one endpoint.

    ``rate_per_s`` of ``None`` means no rate limit; ``burst`` is how many requests may
    go out at once after a quiet spell (at least one).
    """

    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    rate_per_s: float | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise RejectedInput(f"max_in_flight must be at least 1, not {self.max_in_flight}")
        if self.rate_per_s is not None and self.rate_per_s <= 0:
            raise RejectedInput(f"rate_per_s must be positive, not {self.rate_per_s}")
        if self.burst < 1:
            raise RejectedInput(f"burst must be at least 1, not {self.burst}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to deliver: one customer endpoint as the registry snapshot describes it."""

    id: str
    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    limits: EndpointLimits = EndpointLimits()
    # The auth object is shared by every request to the endpoint, so an OAuth2 token
    # fetched for one request serves the rest; it never takes part in equality.
    auth: Auth | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise RejectedInput(f"endpoint {self.id}: timeout_s must be positive, not {self.timeout_s}")


@dataclass(frozen=True, slots=True)
class Request:
    """One POST to an endpoint; ``headers`` already hold the signature and content type."""

    endpoint: Endpoint
    body: bytes
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Response:
    """The endpoint answered. ``headers`` have lower-case names; ``body`` may be truncated."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class FailureKind(StrEnum):
    TIMEOUT = "timeout"
    """The endpoint did not answer within its own timeout."""
    CONNECTION = "connection"
    """No connection, or it broke (refused, reset, DNS, TLS)."""
    DEADLINE = "deadline"
    """The delivery stage's deadline came first; the request may or may not have arrived."""
    CIRCUIT_OPEN = "circuit_open"
    """Not sent: the endpoint's circuit breaker is open."""
    THROTTLED = "throttled"
    """Not sent: the endpoint asked for a pause (429 or 503 with ``Retry-After``) that has not passed."""
    DEFERRED = "deferred"
    """Not sent by the delivery job: the endpoint is failing, so the retry path sends it, at once.
    Not an attempt: it is not counted or logged as one."""
    AUTH = "auth"
    """Not sent: the endpoint's credentials (an OAuth2 token) could not be obtained."""
    INVALID_REQUEST = "invalid_request"
    """Can never be sent as it stands (a malformed URL)."""
    ADDRESS_REFUSED = "address_refused"
    """Not sent: the endpoint's host is, or resolves to, a non-public address the operator's
    allow-list does not admit. Permanent, like a malformed URL: a configuration problem of the
    endpoint that retrying will not fix; the message is dead-lettered at once with the reason,
    and can be replayed once the URL or the allow-list changes."""


@dataclass(frozen=True, slots=True)
class Failure:
    """No HTTP response: why, in words a customer can read in the attempt log."""

    kind: FailureKind
    detail: str
    elapsed_s: float = 0.0


Result = Response | Failure


class Transport(Protocol):
    """Sends one request. Implementations return network problems as :class:`Failure`."""

    async def send(self, request: Request) -> Result: ...


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
    allowed: AddressPolicy = AddressPolicy()
    """Which non-public addresses may be reached; by default none."""


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_DNS_CACHE_S",
    "DEFAULT_KEEPALIVE_S",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "USER_AGENT",
    "Auth",
    "Endpoint",
    "EndpointLimits",
    "Failure",
    "FailureKind",
    "HttpSettings",
    "Request",
    "Response",
    "Result",
    "Transport",
]
