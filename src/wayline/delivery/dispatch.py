"""Sending a group of requests under one deadline, without one endpoint holding up the rest.

:meth:`Dispatcher.deliver_all` starts every request at once; each endpoint has its own
in-flight limit, rate limit and circuit breaker, so a hanging endpoint only ever
occupies its own slots. When the deadline comes, whatever has not finished is
cancelled and comes back as a ``deadline`` failure for the retry path: a micro-batch
never waits on an endpoint longer than its stage's budget.

What the endpoint says about itself holds for the rest of the group at once: after a
``Retry-After`` (429, 503) nothing more goes to that endpoint until the pause ends, and
after a 410 nothing more goes to that subscription. Requests that never left — held by
those, by an open circuit, or still waiting for a slot at the deadline — come back as
:class:`~wayline.delivery.retry.HeldBack`: no attempt.

Works over any :class:`~wayline.delivery.transports.base.Transport`. One dispatcher belongs
to one event loop (its semaphores bind to the loop that first uses them).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from wayline.core.errors import RetryLater
from wayline.delivery.circuit import CircuitBreaker, CircuitBreakers, Throttles
from wayline.delivery.retry import DEFAULT_MAX_RETRY_AFTER, GONE, HeldBack, Verdict, classify, retry_after
from wayline.delivery.transports.base import (
    Endpoint,
    EndpointLimits,
    Failure,
    FailureKind,
    Request,
    Response,
    Result,
    Transport,
)


class TokenBucket:
    """A rate limit with bursts, kept as the time the next token is free (GCRA).

    Each caller reserves its slot and learns how long to wait, so waiting callers
    are served in order without polling.
    """

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self._interval = 1.0 / rate_per_s
        self._tolerance = (burst - 1) * self._interval
        self._next_free = -math.inf

    def reserve(self, now: float) -> float:
        """Take a token; return the seconds to wait before using it."""
        slot = max(self._next_free, now)
        self._next_free = slot + self._interval
        return max(0.0, slot - self._tolerance - now)


@dataclass(slots=True)
class _Gate:
    limits: EndpointLimits
    in_flight: asyncio.Semaphore
    bucket: TokenBucket | None


@dataclass(slots=True)
class _Progress:
    sent_at: float | None = None
    """When the request went to the transport (loop time); None while it waits for a slot."""
    answered_in: float | None = None
    """Seconds from ``sent_at`` to the transport's result."""


STRAGGLER_FACTOR = 4.0
"""How many times the group's median answer a request must be out for its endpoint to be slow."""

OnResult = Callable[[int, Result], None]
"""Told each request's result (by position) as soon as it is known, before the group ends."""
OnStraggler = Callable[[str], None]
"""Told the id of each endpoint whose requests were cut as stragglers."""


class Dispatcher:
    """Sends groups of requests through one transport, keeping per-endpoint limits between groups."""

    def __init__(self, transport: Transport, breakers: CircuitBreakers | None = None,
                 throttles: Throttles | None = None, max_retry_after: timedelta = DEFAULT_MAX_RETRY_AFTER) -> None:
        self._transport = transport
        self._breakers = breakers
        self._throttles = throttles if throttles is not None else Throttles()
        self._max_retry_after = max_retry_after
        self._gates: dict[str, _Gate] = {}

    async def deliver_all(self, requests: Sequence[Request], deadline_s: float, *,
                          subscriptions: Sequence[str] | None = None, on_result: OnResult | None = None,
                          straggler_cut_s: float | None = None, on_straggler: OnStraggler | None = None,
                          ) -> list[Result]:
        """One result per request, in order, within ``deadline_s`` seconds of the call.

        ``subscriptions`` (one per request) lets a 410 hold back the rest of its
        subscription's requests; ``on_result`` hears of each finished request at once.
        With ``straggler_cut_s``, once every unfinished request belongs to an endpoint
        that has had a request out for that long (and for :data:`STRAGGLER_FACTOR` times
        the group's median answer), those endpoints' requests are cut at once rather than
        at the deadline (``on_straggler`` hears of each such endpoint): a slow endpoint
        holds the group up that long after the rest are done, no more.
        Requests cut are only in the returned list.

        A cut is one failure of its endpoint for the circuit breaker, however many of its
        requests were out: the endpoint did not answer in time once. Counted per request,
        the sixteen requests a busy endpoint has out when a backlog's stage reaches its
        deadline were sixteen failures in a row, which opened every such endpoint's circuit
        at once and sent the whole stream through the retry path for the cool-down."""
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        started = loop.time()
        progress = [_Progress() for _ in requests]
        gone: set[str] = set()
        cut_in_flight: set[str] = set()
        tasks: list[asyncio.Task[Result]] = []
        stragglers: set[int] = set()
        watcher: asyncio.Task[None] | None = None

        async def deliver(position: int) -> Result:
            subscription = subscriptions[position] if subscriptions is not None else None
            result = await self._deliver(requests[position], progress[position], subscription, gone, cut_in_flight)
            if subscription is not None and isinstance(result, Response) and result.status == GONE:
                gone.add(subscription)
            if on_result is not None:
                on_result(position, result)
            return result

        try:
            # The task group cancels and awaits every unfinished send when the deadline
            # fires, and when the caller itself is cancelled: no send outlives the call.
            async with asyncio.timeout(deadline_s), asyncio.TaskGroup() as group:
                tasks = [group.create_task(deliver(position)) for position in range(len(requests))]
                if straggler_cut_s is not None:
                    watcher = asyncio.create_task(_cut_stragglers(
                        tasks, requests, progress, straggler_cut_s, stragglers, on_straggler or (lambda _: None)))
        except TimeoutError:
            pass
        finally:
            if watcher is not None:
                watcher.cancel()
            if self._breakers is not None:
                for endpoint_id in cut_in_flight:
                    self._breakers[endpoint_id].record_failure()
        cut_after = loop.time() - started
        straggling = (f"within {straggler_cut_s or 0:g} s once every other endpoint of the stage was done: cut as "
                      "a straggler (the endpoint is slow; the retry path sends its messages)")
        return [
            _cut(p, straggling if position in stragglers else f"within the {deadline_s:g} s delivery deadline",
                 cut_after)
            if task.cancelled() else task.result()
            for position, (task, p) in enumerate(zip(tasks, progress, strict=True))
        ]

    def _held(self, endpoint: Endpoint, subscription: str | None, gone: set[str]) -> HeldBack | None:
        """Why a request may not leave now, if it may not."""
        if subscription is not None and subscription in gone:
            return HeldBack(FailureKind.INVALID_REQUEST,
                            f"not sent: endpoint {endpoint.id} answered 410 Gone for subscription {subscription}")
        pause = self._throttles.remaining(endpoint.id)
        if pause > 0:
            return HeldBack(FailureKind.THROTTLED,
                            f"not sent: endpoint {endpoint.id} asked (Retry-After) to wait {pause:.1f} s more",
                            wait_s=pause)
        return None

    async def _deliver(self, request: Request, progress: _Progress, subscription: str | None,
                       gone: set[str], cut_in_flight: set[str]) -> Result:
        endpoint = request.endpoint
        held = self._held(endpoint, subscription, gone)
        if held is not None:
            return held
        breaker = self._breakers[endpoint.id] if self._breakers is not None else None
        if breaker is not None and not breaker.allow():
            return HeldBack(FailureKind.CIRCUIT_OPEN, f"endpoint {endpoint.id} keeps failing; its circuit is open",
                            wait_s=breaker.retry_in())
        gate = self._gate(endpoint)
        async with gate.in_flight:
            if gate.bucket is not None:
                wait = gate.bucket.reserve(asyncio.get_running_loop().time())
                if wait > 0:
                    await asyncio.sleep(wait)
            # The endpoint may have spoken while this request waited for its slot.
            held = self._held(endpoint, subscription, gone)
            if held is not None:
                return held
            if endpoint.auth is not None:
                try:
                    extra = await endpoint.auth.headers()
                except RetryLater as exc:
                    return Failure(FailureKind.AUTH, str(exc))
                request = replace(request, headers={**request.headers, **extra})
            loop = asyncio.get_running_loop()
            progress.sent_at = loop.time()
            try:
                result = await self._transport.send(request)
            except asyncio.CancelledError:
                # Cut while the endpoint had the request: it is slow (counted once per group).
                cut_in_flight.add(endpoint.id)
                raise
            progress.answered_in = loop.time() - progress.sent_at
        pause = retry_after(result, datetime.now(timezone.utc), self._max_retry_after)
        if pause is not None and pause > timedelta(0):
            self._throttles.pause(endpoint.id, pause.total_seconds())
        _record(breaker, failed=classify(result) is Verdict.RETRY)
        return result

    def _gate(self, endpoint: Endpoint) -> _Gate:
        gate = self._gates.get(endpoint.id)
        # The same limits object is the common case: no field-by-field comparison per request.
        if gate is None or (gate.limits is not endpoint.limits and gate.limits != endpoint.limits):
            # New or changed limits apply to requests from now on; requests already
            # waiting finish under the old ones.
            limits = endpoint.limits
            bucket = TokenBucket(limits.rate_per_s, limits.burst) if limits.rate_per_s is not None else None
            gate = self._gates[endpoint.id] = _Gate(limits, asyncio.Semaphore(limits.max_in_flight), bucket)
        return gate


def _record(breaker: CircuitBreaker | None, *, failed: bool) -> None:
    if breaker is None:
        return
    if failed:
        breaker.record_failure()
    else:
        breaker.record_success()


async def _cut_stragglers(tasks: Sequence[asyncio.Task[Result]], requests: Sequence[Request],
                          progress: Sequence[_Progress], cut_s: float, cut: set[int], on_straggler: OnStraggler,
                          ) -> None:
    """Cancel the unfinished requests of slow endpoints, once only slow endpoints are left
    and the others are done (their positions go to ``cut``). An endpoint is slow when one
    of its requests has been out for ``cut_s`` and for :data:`STRAGGLER_FACTOR` times the
    median answer of the group so far, and its own answers, if it gave any, are that slow
    too; one that is merely busy (waiting for its own slots, or answering at the group's
    pace with a longer queue) is not. Slow is judged against the group's own answers,
    none before the first, and a straggler is a minority: when most endpoints answer
    slowly (a loaded sender or a shared upstream), none holds the others up, and cutting
    them would send the whole stream through the retry path. Stages that caught up a
    backlog on a loaded machine showed both: four answers came, then every one of its 50
    endpoints was cut and deferred for ``slow_for_s``; and the endpoints with the most
    requests left at a stage's end were cut while they answered like the rest."""
    loop = asyncio.get_running_loop()
    endpoints = len({request.endpoint.id for request in requests})
    while True:
        await asyncio.sleep(min(cut_s / 4, 0.05))
        answered: dict[str, list[float]] = {}
        for request, p in zip(requests, progress, strict=True):
            if p.answered_in is not None:
                answered.setdefault(request.endpoint.id, []).append(p.answered_in)
        if not answered:
            continue
        out_for = max(cut_s, STRAGGLER_FACTOR * statistics.median(a for own in answered.values() for a in own))
        now = loop.time()
        unfinished: dict[str, list[int]] = {}
        for position, task in enumerate(tasks):
            if not task.done():
                unfinished.setdefault(requests[position].endpoint.id, []).append(position)
        slow = {endpoint for endpoint, positions in unfinished.items()
                if statistics.median(answered.get(endpoint) or [math.inf]) >= out_for
                and any((sent := progress[p].sent_at) is not None and now - sent >= out_for for p in positions)}
        if not slow or len(slow) < len(unfinished) or len(unfinished) == endpoints or 2 * len(slow) > endpoints:
            # Nothing slow yet, or others still at work (a straggler holds up no one), or
            # most of the group is slow (the slowness is not theirs).
            continue
        for endpoint in sorted(slow):
            on_straggler(endpoint)
            for position in unfinished[endpoint]:
                cut.add(position)
                tasks[position].cancel()
        return


def _cut(progress: _Progress, within: str, elapsed_s: float) -> Failure:
    if progress.sent_at is not None:
        return Failure(FailureKind.DEADLINE, f"no response {within}", elapsed_s)
    # It never left: the endpoint is slow to take requests, not to answer this one.
    return HeldBack(FailureKind.DEADLINE, (
        f"not sent {within} (waiting for the endpoint's in-flight limit, rate limit or credentials)"
    ), elapsed_s)


__all__ = ["STRAGGLER_FACTOR", "Dispatcher", "OnResult", "OnStraggler", "TokenBucket"]
