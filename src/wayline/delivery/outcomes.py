"""Counting what delivery did, small enough to travel from every task to the driver.

A sending task tallies its stage per (endpoint, subscription) and returns the tally as
a few rows (:meth:`Tally.rows`); the driver adds the rows of every task to the
micro-batch's :class:`BatchSummary`, and the summaries to the running totals that the
metrics endpoint shows. Every delivery a stage is handed ends in exactly one outcome.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from wayline.delivery.attempt import DeadLettered, Pending, State, Succeeded, WillRetry
from wayline.delivery.transports.base import Response, Result

# Upper bounds (seconds) of the response-latency histogram; one more bucket holds the rest.
LATENCY_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Outcome(StrEnum):
    DELIVERED = "delivered"
    """Acknowledged with a 2xx, and logged."""
    RETRIED = "retried"
    """Failed, cut by the deadline or held back by the circuit: in the retry store, due later."""
    DEAD_LETTERED = "dead_lettered"
    """No attempt left (permanent failure, 410): handed to the retry path for the dead-letter store."""
    SKIPPED = "skipped"
    """Not sent: already acknowledged or handed over (a replayed micro-batch), or a duplicate."""


def failure_reason(outcome: Result) -> str:
    """A short, low-cardinality label for a failed attempt: ``http_503``, ``timeout``, ``deadline``…"""
    return f"http_{outcome.status}" if isinstance(outcome, Response) else outcome.kind.value


@dataclass(slots=True)
class PairTally:
    """One (endpoint, subscription)'s deliveries."""

    outcomes: Counter[Outcome] = field(default_factory=Counter)
    gone: int = 0
    """Answers of 410: the subscription is to be disabled."""
    failures: Counter[str] = field(default_factory=Counter)
    latency_sum_s: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    """Responses per latency bucket (not cumulative); the last holds those slower than every bound."""

    def observe(self, outcome: Result) -> None:
        # Only answers have a latency that says something about the endpoint; a deadline
        # cut or an open circuit measures Wayline's own budget.
        if isinstance(outcome, Response):
            self.latency_sum_s += outcome.elapsed_s
            self.latency_buckets[bisect.bisect_left(LATENCY_BUCKETS_S, outcome.elapsed_s)] += 1

    def merge(self, other: PairTally) -> None:
        self.outcomes.update(other.outcomes)
        self.gone += other.gone
        self.failures.update(other.failures)
        self.latency_sum_s += other.latency_sum_s
        self.latency_buckets = [a + b for a, b in zip(self.latency_buckets, other.latency_buckets, strict=True)]


PairKey = tuple[str, str]  # (endpoint id, subscription id)


class Tally:
    """Outcomes per (endpoint, subscription)."""

    def __init__(self) -> None:
        self._pairs: dict[PairKey, PairTally] = {}

    def _pair(self, pending: Pending) -> PairTally:
        key = (pending.endpoint_id, pending.subscription_id)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = PairTally()
        return pair

    def skipped(self, pending: Pending) -> None:
        self._pair(pending).outcomes[Outcome.SKIPPED] += 1

    def settled(self, state: State) -> None:
        if isinstance(state, Succeeded):
            pair = self._pair(state.delivered)
            pair.outcomes[Outcome.DELIVERED] += 1
            pair.observe(state.response)
            return
        outcome: Result
        if isinstance(state, WillRetry):
            pair, outcome, result = self._pair(state.next), state.outcome, Outcome.RETRIED
        elif isinstance(state, DeadLettered):
            pair, outcome, result = self._pair(state.failed), state.outcome, Outcome.DEAD_LETTERED
        else:
            pair, outcome, result = self._pair(state.failed), state.response, Outcome.DEAD_LETTERED
            pair.gone += 1
        pair.outcomes[result] += 1
        pair.failures[failure_reason(outcome)] += 1
        pair.observe(outcome)

    def merge(self, other: Tally) -> None:
        for key, theirs in other._pairs.items():
            self._add(key, theirs)

    def _add(self, key: PairKey, counts: PairTally) -> None:
        mine = self._pairs.get(key)
        if mine is None:
            mine = self._pairs[key] = PairTally()
        mine.merge(counts)

    def items(self) -> Iterator[tuple[PairKey, PairTally]]:
        return iter(self._pairs.items())

    def total(self, outcome: Outcome) -> int:
        return sum(pair.outcomes[outcome] for pair in self._pairs.values())

    def gone_subscriptions(self) -> set[str]:
        return {subscription for (_, subscription), pair in self._pairs.items() if pair.gone}

    def rows(self) -> list[dict[str, Any]]:
        """One plain row per pair, for the Arrow batch a task returns to the driver."""
        return [
            {
                "endpoint_id": endpoint_id,
                "subscription_id": subscription_id,
                **{outcome.value: pair.outcomes[outcome] for outcome in Outcome},
                "gone": pair.gone,
                "failures": sorted(pair.failures.items()),
                "latency_sum_s": pair.latency_sum_s,
                "latency_buckets": list(pair.latency_buckets),
            }
            for (endpoint_id, subscription_id), pair in self._pairs.items()
        ]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Tally:
        """The sum of rows made by :meth:`rows` (failures as a mapping or as pairs)."""
        tally = cls()
        for row in rows:
            failures = row["failures"]
            tally._add((row["endpoint_id"], row["subscription_id"]), PairTally(
                outcomes=Counter({outcome: int(row[outcome.value]) for outcome in Outcome if row[outcome.value]}),
                gone=int(row["gone"]),
                failures=Counter(dict(failures.items() if isinstance(failures, Mapping) else failures)),
                latency_sum_s=float(row["latency_sum_s"]),
                latency_buckets=[int(n) for n in row["latency_buckets"]],
            ))
        return tally


@dataclass
class BatchSummary:
    """What one micro-batch did, or (merged) everything since the job started."""

    events: int = 0
    """Valid events read."""
    quarantined: Counter[str] = field(default_factory=Counter)
    """Records sent to quarantine, by reason."""
    filtered: int = 0
    """Valid events that matched no subscription."""
    held: int = 0
    """Batch-mode pairs handed to the batching query, to wait for a full batch or ``max_wait``."""
    phase_seconds: Counter[str] = field(default_factory=Counter)
    """Wall time per step of the micro-batch (parse, match, batch, send): where the time goes."""
    deliveries: Tally = field(default_factory=Tally)
    batches: int = 0
    registry_version: int = 0

    def to_json(self) -> bytes:
        """The counts (not the registry version) as JSON, for a task to return to the driver."""
        return orjson.dumps({
            "events": self.events, "quarantined": dict(self.quarantined), "filtered": self.filtered,
            "held": self.held, "phase_seconds": dict(self.phase_seconds), "deliveries": self.deliveries.rows(),
            "batches": self.batches,
        })

    @classmethod
    def from_json(cls, data: bytes) -> BatchSummary:
        counts = orjson.loads(data)
        return cls(
            events=counts["events"], quarantined=Counter(counts["quarantined"]), filtered=counts["filtered"],
            held=counts["held"], phase_seconds=Counter(counts["phase_seconds"]),
            deliveries=Tally.from_rows(counts["deliveries"]), batches=counts["batches"],
        )

    def merge(self, other: BatchSummary) -> None:
        self.events += other.events
        self.quarantined.update(other.quarantined)
        self.filtered += other.filtered
        self.held += other.held
        self.phase_seconds.update(other.phase_seconds)
        self.deliveries.merge(other.deliveries)
        self.batches += other.batches
        self.registry_version = other.registry_version


__all__ = [
    "LATENCY_BUCKETS_S",
    "BatchSummary",
    "Outcome",
    "PairKey",
    "PairTally",
    "Tally",
    "failure_reason",
]
