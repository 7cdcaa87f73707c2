"""One delivery stage: the deliveries of one task, sent under one deadline, their outcomes kept.

:func:`run_stage` is what a sending task does, whatever the delivery mode (streaming
hands it one :class:`~wayline.delivery.attempt.Pending` per event and subscription,
batch mode one per batch):

1. skip duplicates (the same ``webhook-id`` twice) and whatever the store already
   settled — so a micro-batch replayed after a crash sends nothing that was
   acknowledged or handed to the retry path;
2. hold back what may not go now whatever the registry snapshot says: deliveries to a
   subscription that is disabled or whose endpoint answered 410 Gone are dead-lettered
   unsent, those to an endpoint that asked for a pause wait in the retry store until it
   ends (no attempt counted);
3. sign the rest and send them all at once through one dispatcher (per-endpoint
   in-flight limit, rate limit, circuit breaker, ``Retry-After`` pauses) within the
   stage deadline;
4. settle each outcome on the retry schedule as it comes and record them in small
   batches while the rest are still in flight (every ``settle_every_s`` or
   ``settle_batch`` outcomes, off the event loop): successes in the delivery log,
   everything else in the retry store. A crash then resends only what was in flight or
   not yet recorded, not the whole stage. Nothing waits beyond the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol, TypeVar

from wayline.core.settings import DeliverySettings
from wayline.delivery.attempt import DeadLettered, DeadLetterReason, Pending, State, defer, hold, settle
from wayline.delivery.circuit import CircuitSettings, process_breakers, process_slow_endpoints, process_throttles
from wayline.delivery.dispatch import Dispatcher
from wayline.delivery.outcomes import Tally
from wayline.delivery.retry import DEFAULT_RETRY_POLICY, HeldBack, Random, RetryPolicy
from wayline.delivery.targets import Target
from wayline.delivery.transports.base import Endpoint, Failure, FailureKind, Request, Result, Transport

TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]
Record = Callable[[Sequence[State]], None]
"""Keeps a batch of settled deliveries (the store's ``record``, the retry queue's ``settle``)."""
_T = TypeVar("_T")
Run = Callable[[Coroutine[Any, Any, _T]], _T]
"""Runs a stage's sends to the end: ``asyncio.run`` (a loop per stage), or a long-lived
loop's runner whose transport and connections outlive the stage."""

# A crash resends what was settled but not yet recorded: about 0.15 s of outcomes (plus
# one write), in one statement per table per batch rather than one round trip per request.
SETTLE_EVERY_S = 0.15
SETTLE_BATCH = 500


@dataclass(frozen=True, slots=True)
class Blocked:
    """What may not be sent to now, whatever the registry snapshot says."""

    gone: frozenset[str] = frozenset()
    """Subscriptions disabled, or whose endpoint answered 410 Gone since they last changed."""
    throttled: dict[str, datetime] = field(default_factory=dict)
    """Endpoints that asked for a pause, and until when."""


@dataclass(frozen=True, slots=True)
class Screening:
    """What a stage must not send, read before it sends anything."""

    settled: frozenset[str]
    """The webhook ids that need no sending: acknowledged, handed to the retry path, or dead."""
    blocked: Blocked


class DeliveryStore(Protocol):
    """What a delivery stage needs from storage; ``wayline.delivery.storage`` keeps it in PostgreSQL,
    and the retry path reads the same tables."""

    def screen(self, webhook_ids: Collection[str], subscription_ids: Collection[str],
               endpoint_ids: Collection[str]) -> Screening:
        """Which of these ids are settled, which of these subscriptions are gone and which of
        these endpoints are throttled: one read (a stage's fixed cost, paid at every fetch)."""
        ...

    def record(self, states: Sequence[State]) -> None:
        """Keep the outcome of each attempt: successes in the log, the rest in the retry store."""
        ...


@dataclass(frozen=True, slots=True)
class StageSettings:
    deadline_s: float
    policy: RetryPolicy = DEFAULT_RETRY_POLICY
    circuit: CircuitSettings = CircuitSettings()
    settle_every_s: float = SETTLE_EVERY_S
    settle_batch: int = SETTLE_BATCH
    straggler_cut_s: float | None = None
    """Cut slow endpoints' requests this long after only they are left (the delivery job's
    stages; the retry path, whose work the slow endpoints are, waits for the deadline)."""
    slow_for_s: float = 30.0
    """An endpoint cut as a straggler is deferred to the retry path this long."""

    @classmethod
    def from_settings(cls, delivery: DeliverySettings) -> StageSettings:
        return cls(
            deadline_s=delivery.stage_deadline_s,
            policy=RetryPolicy(
                schedule=tuple(timedelta(seconds=s) for s in delivery.retry_schedule_s), jitter=delivery.retry_jitter
            ),
            circuit=CircuitSettings(
                consecutive_failures=delivery.circuit_consecutive_failures, failure_rate=delivery.circuit_failure_rate,
                window=delivery.circuit_window, min_calls=delivery.circuit_min_calls,
                cool_down_s=delivery.circuit_cool_down_s,
            ),
            straggler_cut_s=delivery.straggler_cut_s,
            slow_for_s=delivery.slow_for_s,
        )

    def policy_for(self, target: Target | None) -> RetryPolicy:
        """The deployment's policy with the endpoint's own schedule and retried statuses, if it has them."""
        if target is None or (target.retry_schedule is None and not target.retry_statuses):
            return self.policy
        return replace(self.policy, schedule=target.retry_schedule or self.policy.schedule,
                       retry_statuses=target.retry_statuses)


def utc_now() -> datetime:
    """The clock a stage settles by, unless a test gives its own."""
    return datetime.now(timezone.utc)


def run_stage(
    pendings: Iterable[Pending],
    targets: Mapping[str, Target],
    store: DeliveryStore,
    transport: TransportFactory,
    settings: StageSettings,
    *,
    clock: Callable[[], datetime] = utc_now,
    rng: Random | None = None,
    failing: Collection[str] = frozenset(),
    gone: Collection[str] = frozenset(),
    run: Run[list[State]] = asyncio.run,
    on_settled: Record = lambda _: None,
) -> Tally:
    """Deliver ``pendings`` to their endpoints (``targets`` by id); returns what happened to each.

    ``on_settled`` hears of each batch of states once the store keeps it (the self-audit's
    outcomes are written from them). Deliveries to the ``gone`` subscriptions (known gone to
    the caller, besides what the store says) are dead-lettered unsent.

    Deliveries to the ``failing`` endpoints, and to those this process recently cut as
    stragglers, are handed to the retry path unsent: a hanging endpoint would otherwise
    hold every stage it is in until the deadline (or the straggler cut), and with it every
    healthy endpoint's deliveries of the micro-batch.
    """
    tally = Tally()
    unique: dict[str, Pending] = {}
    for pending in pendings:
        if pending.webhook_id in unique:
            tally.skipped(pending)
        else:
            unique[pending.webhook_id] = pending
    if not unique:
        return tally
    # The subscriptions and endpoints of the settled ones too: one read for all, before
    # knowing which are settled.
    screening = store.screen(unique.keys(), {p.subscription_id for p in unique.values()},
                             {p.endpoint_id for p in unique.values()})
    fresh: list[Pending] = []
    for pending in unique.values():
        if pending.webhook_id in screening.settled:
            tally.skipped(pending)
        else:
            fresh.append(pending)
    if not fresh:
        return tally

    def record(states: Sequence[State]) -> None:
        store.record(states)
        on_settled(states)

    blocked = screening.blocked
    slow = process_slow_endpoints()
    now = clock()
    todo: list[Pending] = []
    unsent: list[State] = []
    for pending in fresh:
        if pending.subscription_id in blocked.gone or pending.subscription_id in gone:
            unsent.append(abandon(pending))
        elif pending.endpoint_id in blocked.throttled:
            until = blocked.throttled[pending.endpoint_id]
            unsent.append(hold(pending, HeldBack(
                FailureKind.THROTTLED, f"not sent: endpoint {pending.endpoint_id} asked (Retry-After) for a pause "
                f"until {until:%H:%M:%S} UTC", wait_s=max(0.0, (until - now).total_seconds())), now))
        elif pending.endpoint_id in failing:
            unsent.append(defer(pending, now))
        elif slow.remaining(pending.endpoint_id) > 0:
            unsent.append(defer(pending, now, "was cut as a straggler (slow to answer) a moment ago"))
        else:
            todo.append(pending)
    if unsent:
        record(unsent)
    states = unsent + (attempt_all(todo, targets, transport, settings, record, clock=clock, rng=rng, run=run)
                       if todo else [])
    for state in states:
        tally.settled(state)
    return tally


def abandon(pending: Pending) -> DeadLettered:
    """``pending``'s subscription is gone: a dead letter, unsent, its attempt count unchanged
    (the customer can replay it once the subscription is enabled again)."""
    return DeadLettered(pending, HeldBack(FailureKind.INVALID_REQUEST, (
        f"not sent: subscription {pending.subscription_id} is disabled or its endpoint answered 410 Gone")),
        DeadLetterReason.REJECTED)


def attempt_all(
    todo: Sequence[Pending],
    targets: Mapping[str, Target],
    transport: TransportFactory,
    settings: StageSettings,
    record: Record,
    *,
    clock: Callable[[], datetime] = utc_now,
    rng: Random | None = None,
    run: Run[list[State]] = asyncio.run,
) -> list[State]:
    """Send each of ``todo`` once under the stage deadline (no dedupe, no store check: the
    caller decided they are due) and ``record`` where each one goes next, in batches as
    they finish; returns those states, in order."""
    return run(_attempt(todo, targets, transport, settings, record, clock, rng or random.Random()))


class _Recorder:
    """Records settled deliveries in batches, off the event loop, while sends go on."""

    def __init__(self, record: Record, every_s: float, batch: int) -> None:
        self._record = record
        self._every_s = every_s
        self._batch = batch
        self._waiting: list[State] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._run())

    def add(self, state: State) -> None:
        self._waiting.append(state)
        if len(self._waiting) >= self._batch:
            self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._every_s):
                    await self._wake.wait()
            self._wake.clear()
            batch, self._waiting = self._waiting, []
            if batch:
                await asyncio.to_thread(self._record, batch)
            if self._closing and not self._waiting:
                return

    async def close(self) -> None:
        """Record what is left; raises what a recording raised."""
        self._closing = True
        self._wake.set()
        await self._task

    def cancel(self) -> None:
        self._task.cancel()


async def _attempt(
    todo: Sequence[Pending],
    targets: Mapping[str, Target],
    transport_factory: TransportFactory,
    settings: StageSettings,
    record: Record,
    clock: Callable[[], datetime],
    chance: Random,
) -> list[State]:
    """One state per delivery, in order: after an answer, or after why it was not (or not fully) sent."""
    policies = {endpoint: settings.policy_for(targets.get(endpoint)) for endpoint in {p.endpoint_id for p in todo}}
    states: list[State | None] = [None] * len(todo)
    recorder = _Recorder(record, settings.settle_every_s, settings.settle_batch)

    def settled(position: int, result: Result) -> None:
        pending = todo[position]
        state = states[position] = settle(pending, result, clock(), chance, policies[pending.endpoint_id])
        recorder.add(state)

    try:
        async with transport_factory() as transport:
            endpoints: dict[str, Endpoint] = {}
            requests: list[Request] = []
            positions: list[int] = []
            at = clock()
            for position, pending in enumerate(todo):
                target = targets.get(pending.endpoint_id)
                if target is None:
                    # Batch state or a retry can outlive its endpoint; the customer can replay
                    # the dead letter once the endpoint is back.
                    settled(position, Failure(
                        FailureKind.INVALID_REQUEST, f"endpoint {pending.endpoint_id} is disabled or deleted"))
                elif target.problem is not None:
                    settled(position, Failure(FailureKind.AUTH, target.problem))
                else:
                    endpoint = endpoints.get(target.id)
                    if endpoint is None:
                        endpoint = endpoints[target.id] = target.bind(transport)
                    requests.append(pending.request(endpoint, target.secrets, at))
                    positions.append(position)
            dispatcher = Dispatcher(transport, process_breakers(settings.circuit), process_throttles(),
                                    settings.policy.max_retry_after)
            slow = process_slow_endpoints()
            results = await dispatcher.deliver_all(
                requests, settings.deadline_s, subscriptions=[todo[p].subscription_id for p in positions],
                on_result=lambda index, result: settled(positions[index], result),
                straggler_cut_s=settings.straggler_cut_s,
                on_straggler=lambda endpoint_id: slow.pause(endpoint_id, settings.slow_for_s))
        for index, result in enumerate(results):
            if states[positions[index]] is None:
                settled(positions[index], result)
        await recorder.close()
    except BaseException:
        recorder.cancel()
        raise
    return [state for state in states if state is not None]


__all__ = [
    "Blocked", "DeliveryStore", "Record", "Run", "SETTLE_BATCH", "SETTLE_EVERY_S", "Screening", "StageSettings", "TransportFactory", "abandon",
    "attempt_all", "run_stage", "utc_now",
]
