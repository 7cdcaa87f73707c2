"""Per-endpoint circuit breakers: stop hammering an endpoint that keeps failing.

closed ──(N consecutive failures, or failure rate over the recent window)──▶ open
open ──(cool-down passed: one probe request let through)──▶ half-open
half-open ──(probe succeeds)──▶ closed        half-open ──(probe fails)──▶ open

While open, requests are not sent; the dispatcher hands them to the retry path. The
clock is injected (monotonic seconds) so every transition is testable without sleeping.
A breaker lives in one process: each Python worker trips its own, which is enough to
spare the endpoint, and needs no shared state. :func:`process_breakers` keeps them for
the life of the process, so a breaker that opened in one micro-batch's task is still
open in the next task that worker runs (Spark reuses its Python workers).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from wayline.core.errors import RejectedInput

Clock = Callable[[], float]

DEFAULT_CONSECUTIVE_FAILURES = 5
DEFAULT_FAILURE_RATE = 0.5
DEFAULT_WINDOW = 100
DEFAULT_MIN_CALLS = 20
DEFAULT_COOL_DOWN_S = 30.0


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class CircuitSettings:
    """When to open. The rate is judged over the last ``window`` outcomes once ``min_calls`` are in."""

    consecutive_failures: int = DEFAULT_CONSECUTIVE_FAILURES
    failure_rate: float = DEFAULT_FAILURE_RATE
    window: int = DEFAULT_WINDOW
    min_calls: int = DEFAULT_MIN_CALLS
    cool_down_s: float = DEFAULT_COOL_DOWN_S

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1:
            raise RejectedInput("consecutive_failures must be at least 1")
        if not 0 < self.failure_rate <= 1:
            raise RejectedInput(f"failure_rate is a fraction in (0, 1], not {self.failure_rate}")
        if not 1 <= self.min_calls <= self.window:
            raise RejectedInput("min_calls must be between 1 and window")
        if self.cool_down_s <= 0:
            raise RejectedInput("cool_down_s must be positive")


class CircuitBreaker:
    """One endpoint's breaker. Ask :meth:`allow` before sending, then record the outcome."""

    def __init__(self, settings: CircuitSettings = CircuitSettings(), clock: Clock = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._outcomes: deque[bool] = deque(maxlen=settings.window)
        self._failures_in_window = 0
        self._consecutive = 0
        self._opened_at = 0.0
        self._probe_at: float | None = None

    @property
    def state(self) -> CircuitState:
        return self._state

    def allow(self) -> bool:
        """May a request go out now? In half-open this grants the single probe."""
        if self._state is CircuitState.CLOSED:
            return True
        now = self._clock()
        if self._state is CircuitState.OPEN:
            if now - self._opened_at < self._settings.cool_down_s:
                return False
            self._state = CircuitState.HALF_OPEN
            self._probe_at = now
            return True
        # A probe whose outcome never came back (its caller was cancelled) must not
        # keep the circuit shut for ever: after another cool-down, grant a new one.
        if self._probe_at is None or now - self._probe_at >= self._settings.cool_down_s:
            self._probe_at = now
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until this breaker lets a request through again (0 while closed)."""
        if self._state is CircuitState.CLOSED:
            return 0.0
        since = self._opened_at if self._state is CircuitState.OPEN else (self._probe_at or self._opened_at)
        return max(0.0, self._settings.cool_down_s - (self._clock() - since))

    def record_success(self) -> None:
        if self._state is CircuitState.HALF_OPEN:
            self._close()
        elif self._state is CircuitState.CLOSED:
            self._consecutive = 0
            self._push(failed=False)
        # While open, outcomes of requests let through before it opened change nothing.

    def record_failure(self) -> None:
        if self._state is CircuitState.HALF_OPEN:
            self._open()
            return
        if self._state is CircuitState.OPEN:
            return
        self._consecutive += 1
        self._push(failed=True)
        if self._consecutive >= self._settings.consecutive_failures or self._rate_exceeded():
            self._open()

    def _push(self, *, failed: bool) -> None:
        if len(self._outcomes) == self._outcomes.maxlen and self._outcomes[0]:
            self._failures_in_window -= 1
        self._outcomes.append(failed)
        self._failures_in_window += failed

    def _rate_exceeded(self) -> bool:
        calls = len(self._outcomes)
        return calls >= self._settings.min_calls and self._failures_in_window >= self._settings.failure_rate * calls

    def _open(self) -> None:
        self._state = CircuitState.OPEN
        self._opened_at = self._clock()
        self._probe_at = None

    def _close(self) -> None:
        self._state = CircuitState.CLOSED
        self._outcomes.clear()
        self._failures_in_window = 0
        self._consecutive = 0
        self._probe_at = None


class CircuitBreakers:
    """The breakers of every endpoint one process sends to, made on first use."""

    def __init__(self, settings: CircuitSettings = CircuitSettings(), clock: Clock = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def __getitem__(self, endpoint_id: str) -> CircuitBreaker:
        breaker = self._breakers.get(endpoint_id)
        if breaker is None:
            breaker = self._breakers[endpoint_id] = CircuitBreaker(self._settings, self._clock)
        return breaker


@functools.cache
def process_breakers(settings: CircuitSettings) -> CircuitBreakers:
    """This process's breakers for ``settings``, the same object on every call."""
    return CircuitBreakers(settings)


class Throttles:
    """Endpoints that asked for a pause (``Retry-After`` on 429 or 503), until when.

    Unlike a breaker this is the endpoint's own word, so it holds for every request to
    it: the stage records it in the store as well, where other workers and the retry path
    read it; this object covers the requests of the process until they do.
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def pause(self, endpoint_id: str, seconds: float) -> None:
        until = self._clock() + seconds
        if until > self._until.get(endpoint_id, 0.0):
            self._until[endpoint_id] = until

    def remaining(self, endpoint_id: str) -> float:
        """Seconds the endpoint asked to be left alone for still, 0 if none."""
        until = self._until.get(endpoint_id)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._until[endpoint_id]
            return 0.0
        return left


@functools.cache
def process_throttles() -> Throttles:
    """This process's throttles, the same object on every call (Spark reuses its workers)."""
    return Throttles()


@functools.cache
def process_slow_endpoints() -> Throttles:
    """Endpoints this process cut as stragglers, paused for the delivery job (the retry
    path sends to them meanwhile): a pause Wayline chose, kept like an endpoint's own."""
    return Throttles()


__all__ = [
    "DEFAULT_CONSECUTIVE_FAILURES",
    "DEFAULT_COOL_DOWN_S",
    "DEFAULT_FAILURE_RATE",
    "DEFAULT_MIN_CALLS",
    "DEFAULT_WINDOW",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitSettings",
    "CircuitState",
    "Clock",
    "Throttles",
    "process_breakers",
    "process_slow_endpoints",
    "process_throttles",
]
