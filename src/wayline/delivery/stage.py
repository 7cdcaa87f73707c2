"""One delivery stage: the deliveries of one task, sent under one deadline, their outcomes kept.

:func:`run_stage` is what a sending task does, whatever the delivery mode (streaming
hands it one :class:`~wayline.delivery.attempt.Pending` per event and subscription,
batch mode one per batch):

1. skip duplicates (the same ``webhook-id`` twice) and whatever the store already
   settled — so a micro-batch replayed after a crash sends nothing that was
   acknowledged or handed to the retry path;
2. sign the rest and send them all at once through one dispatcher (per-endpoint
   in-flight limit, rate limit and circuit breaker) within the stage deadline;
3. settle every outcome on the retry schedule and record it: successes in the delivery
   log, everything else in the retry store. Nothing waits beyond the deadline.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Protocol

from wayline.core.settings import DeliverySettings
from wayline.delivery.attempt import Pending, State, defer, settle
from wayline.delivery.circuit import CircuitSettings, process_breakers
from wayline.delivery.dispatch import Dispatcher
from wayline.delivery.outcomes import Tally
from wayline.delivery.retry import DEFAULT_RETRY_POLICY, Random, RetryPolicy
from wayline.delivery.targets import Target
from wayline.delivery.transport import Endpoint, Failure, FailureKind, Request, Result, Transport

TransportFactory = Callable[[], AbstractAsyncContextManager[Transport]]


class DeliveryStore(Protocol):
    """What a delivery stage needs from storage; ``wayline.delivery.storage`` keeps it in PostgreSQL."""

    def settled(self, webhook_ids: Collection[str]) -> set[str]:
        """The ids among these that need no sending: acknowledged, handed to the retry path, or dead."""
        ...

    def record(self, states: Sequence[State]) -> None:
        """Keep the outcome of each attempt: successes in the log, the rest in the retry store."""
        ...


@dataclass(frozen=True, slots=True)
class StageSettings:
    deadline_s: float
    policy: RetryPolicy = DEFAULT_RETRY_POLICY
    circuit: CircuitSettings = CircuitSettings()

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
        )

    def policy_for(self, target: Target | None) -> RetryPolicy:
        """The deployment's policy with the endpoint's own schedule and retried statuses, if it has them."""
        if target is None or (target.retry_schedule is None and not target.retry_statuses):
            return self.policy
        return replace(self.policy, schedule=target.retry_schedule or self.policy.schedule,
                       retry_statuses=target.retry_statuses)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def run_stage(
    pendings: Iterable[Pending],
    targets: Mapping[str, Target],
    store: DeliveryStore,
    transport: TransportFactory,
    settings: StageSettings,
    *,
    clock: Callable[[], datetime] = _utc_now,
    rng: Random | None = None,
    failing: Collection[str] = frozenset(),
) -> Tally:
    """Deliver ``pendings`` to their endpoints (``targets`` by id); returns what happened to each.

    Deliveries to the ``failing`` endpoints are handed to the retry path unsent: a hanging
    endpoint would otherwise hold every stage it is in until the deadline, and with it
    every healthy endpoint's deliveries of the micro-batch.
    """
    tally = Tally()
    unique: dict[str, Pending] = {}
    for pending in pendings:
        if pending.webhook_id in unique:
            tally.skipped(pending)
        else:
            unique[pending.webhook_id] = pending
    settled = store.settled(unique.keys())
    todo: list[Pending] = []
    deferred: list[State] = []
    now = clock()
    for pending in unique.values():
        if pending.webhook_id in settled:
            tally.skipped(pending)
        elif pending.endpoint_id in failing:
            deferred.append(defer(pending, now))
        else:
            todo.append(pending)
    if not todo and not deferred:
        return tally
    states = (attempt_all(todo, targets, transport, settings, clock=clock, rng=rng) if todo else []) + deferred
    store.record(states)
    for state in states:
        tally.settled(state)
    return tally


def attempt_all(
    todo: Sequence[Pending],
    targets: Mapping[str, Target],
    transport: TransportFactory,
    settings: StageSettings,
    *,
    clock: Callable[[], datetime] = _utc_now,
    rng: Random | None = None,
) -> list[State]:
    """Send each of ``todo`` once under the stage deadline (no dedupe, no store check: the
    caller decided they are due); where each one goes next, in order."""
    results = asyncio.run(_attempt(todo, targets, transport, settings, clock()))
    finished = clock()
    chance = rng or random.Random()
    policies = {endpoint: settings.policy_for(targets.get(endpoint)) for endpoint in {p.endpoint_id for p in todo}}
    return [
        settle(pending, result, finished, chance, policies[pending.endpoint_id])
        for pending, result in zip(todo, results, strict=True)
    ]


async def _attempt(
    todo: Sequence[Pending],
    targets: Mapping[str, Target],
    transport_factory: TransportFactory,
    settings: StageSettings,
    at: datetime,
) -> list[Result]:
    """One result per delivery, in order: an answer, or why it was not (or not fully) sent."""
    unsendable: dict[int, Failure] = {}
    async with transport_factory() as transport:
        endpoints: dict[str, Endpoint] = {}
        requests: list[Request] = []
        for position, pending in enumerate(todo):
            target = targets.get(pending.endpoint_id)
            if target is None:
                # Batch state or a retry can outlive its endpoint; the customer can replay
                # the dead letter once the endpoint is back.
                unsendable[position] = Failure(
                    FailureKind.INVALID_REQUEST, f"endpoint {pending.endpoint_id} is disabled or deleted"
                )
            elif target.problem is not None:
                unsendable[position] = Failure(FailureKind.AUTH, target.problem)
            else:
                endpoint = endpoints.get(target.id)
                if endpoint is None:
                    endpoint = endpoints[target.id] = target.bind(transport)
                requests.append(pending.request(endpoint, target.secrets, at))
        dispatcher = Dispatcher(transport, process_breakers(settings.circuit))
        answers = iter(await dispatcher.deliver_all(requests, settings.deadline_s))
    return [unsendable[position] if position in unsendable else next(answers) for position in range(len(todo))]


__all__ = ["DeliveryStore", "StageSettings", "TransportFactory", "attempt_all", "run_stage"]
