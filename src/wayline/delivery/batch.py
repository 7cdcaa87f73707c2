"""Count-or-time batching per subscription shard, as a plain class (no Spark).

A batch goes out when ``max_count`` items are pending for a key or ``max_wait`` has
passed since the first of them arrived, whichever comes first. Keys are
(subscription, shard): a hot subscription is spread over several shards that batch
independently, so one subscription never pins one task, and a batch never mixes
subscriptions. Items keep their arrival order within a key.

The Spark layer wraps this in a stateful processor: it restores a key's
:class:`PendingState` from the state store, calls :meth:`Batcher.add` or
:meth:`Batcher.due`, saves :meth:`Batcher.export` back and sets a timer at
:meth:`Batcher.deadline`.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from wayline.core.errors import RejectedInput
from wayline.delivery.signing import batch_message_id

BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
DEFAULT_MAX_COUNT = 1000
DEFAULT_MAX_WAIT = timedelta(seconds=1)


def shard_for(event_id: str, shards: int) -> int:
    """The shard of an event: stable across processes and runs.

    CRC-32 of the UTF-8 id, so the JVM computes the same shard per row with Spark
    SQL's ``pmod(crc32(event_id), shards)`` and Python never sees single rows.
    """
    if shards < 1:
        raise RejectedInput(f"a subscription needs at least one shard, not {shards}")
    return zlib.crc32(event_id.encode("utf-8")) % shards


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_count: int = DEFAULT_MAX_COUNT
    max_wait: timedelta = DEFAULT_MAX_WAIT

    @classmethod
    def of(cls, max_count: int | None, max_wait_ms: int | None) -> BatchLimits:
        """A subscription's limits as the registry holds them (``None``: the default)."""
        return cls(max_count or DEFAULT_MAX_COUNT,
                   DEFAULT_MAX_WAIT if max_wait_ms is None else timedelta(milliseconds=max_wait_ms))

    def __post_init__(self) -> None:
        if self.max_count < 1:
            raise RejectedInput(f"max_count must be at least 1, not {self.max_count}")
        if self.max_wait <= timedelta(0):
            raise RejectedInput(f"max_wait must be positive, not {self.max_wait}")


@dataclass(frozen=True, slots=True, order=True)
class BatchKey:
    subscription_id: str
    shard: int = 0


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One matched event: its id and its structured CloudEvent JSON, exactly as sent."""

    event_id: str
    body: bytes


@dataclass(frozen=True)
class Batch:
    """A ready batch of one key's items, in arrival order."""

    key: BatchKey
    items: tuple[BatchItem, ...]

    @property
    def event_ids(self) -> tuple[str, ...]:
        return tuple(item.event_id for item in self.items)

    @cached_property
    def webhook_id(self) -> str:
        return batch_message_id(self.key.subscription_id, self.event_ids)

    @cached_property
    def body(self) -> bytes:
        """The CloudEvents batch format: a JSON array of the structured events, spliced unparsed."""
        return b"[" + b",".join(item.body for item in self.items) + b"]"


@dataclass(frozen=True, slots=True)
class PendingState:
    """What one key holds between calls: plain values, ready for a state store."""

    items: tuple[BatchItem, ...]
    first_at: datetime
    deadline: datetime


@dataclass(slots=True)
class _Pending:
    items: list[BatchItem]
    first_at: datetime
    deadline: datetime


class Batcher:
    """Holds each key's pending items; hands back batches as they become ready.

    ``limits`` gives a subscription's limits; they are read when a key's first item
    arrives and when items are added, so a changed subscription applies from its
    next items on.
    """

    def __init__(self, limits: Callable[[str], BatchLimits]) -> None:
        self._limits = limits
        self._pending: dict[BatchKey, _Pending] = {}
        # One timer per pending run of a key; entries whose key was emitted since are
        # stale and skipped when they surface (cheaper than removing from the heap).
        self._timers: list[tuple[datetime, BatchKey]] = []

    def add(self, key: BatchKey, items: Sequence[BatchItem], now: datetime) -> list[Batch]:
        """Append ``items`` to ``key``; return the batches that are now full or overdue."""
        if not items:
            return []
        limits = self._limits(key.subscription_id)
        held = self._pending.pop(key, None)
        if held is None:
            queue, first_at, older = list(items), now, 0
        else:
            older = len(held.items)
            held.items.extend(items)
            queue, first_at = held.items, held.first_at
        size = limits.max_count
        full = len(queue) - len(queue) % size
        ready = _chunks(key, queue[:full], size)
        if full == len(queue):
            return ready
        rest = queue[full:] if full else queue
        if full >= older:
            # Every older item went out in a full batch: what is left arrived now.
            first_at = now
        deadline = first_at + limits.max_wait
        if deadline <= now:
            # The key's timer fired late or not yet: overdue items are not held longer.
            ready.append(Batch(key, tuple(rest)))
            return ready
        self._pending[key] = _Pending(rest, first_at, deadline)
        if held is None or held.deadline != deadline:
            heapq.heappush(self._timers, (deadline, key))
        return ready

    def due(self, now: datetime) -> list[Batch]:
        """Every key whose first pending item has waited ``max_wait``, as one batch each."""
        ready: list[Batch] = []
        while self._timers and self._timers[0][0] <= now:
            deadline, key = heapq.heappop(self._timers)
            held = self._pending.get(key)
            if held is not None and held.deadline == deadline:
                del self._pending[key]
                # Chunked by the current limit, which may have dropped since the items arrived.
                ready.extend(_chunks(key, held.items, self._limits(key.subscription_id).max_count))
        return ready

    def next_deadline(self) -> datetime | None:
        """When :meth:`due` will next have something to hand back."""
        while self._timers:
            deadline, key = self._timers[0]
            held = self._pending.get(key)
            if held is not None and held.deadline == deadline:
                return deadline
            heapq.heappop(self._timers)
        return None

    def deadline(self, key: BatchKey) -> datetime | None:
        held = self._pending.get(key)
        return held.deadline if held else None

    def pending(self, key: BatchKey) -> int:
        """How many items ``key`` holds."""
        held = self._pending.get(key)
        return len(held.items) if held else 0

    def export(self, key: BatchKey) -> PendingState | None:
        held = self._pending.get(key)
        if held is None:
            return None
        return PendingState(tuple(held.items), held.first_at, held.deadline)

    def restore(self, key: BatchKey, state: PendingState) -> None:
        self._pending[key] = _Pending(list(state.items), state.first_at, state.deadline)
        heapq.heappush(self._timers, (state.deadline, key))

    def forget(self, key: BatchKey) -> None:
        """Drop a key from memory (its state lives in the state store meanwhile)."""
        self._pending.pop(key, None)


def _chunks(key: BatchKey, items: list[BatchItem], size: int) -> list[Batch]:
    return [Batch(key, tuple(items[i : i + size])) for i in range(0, len(items), size)]


__all__ = [
    "BATCH_CONTENT_TYPE",
    "DEFAULT_MAX_COUNT",
    "DEFAULT_MAX_WAIT",
    "Batch",
    "BatchItem",
    "BatchKey",
    "BatchLimits",
    "Batcher",
    "PendingState",
    "shard_for",
]
