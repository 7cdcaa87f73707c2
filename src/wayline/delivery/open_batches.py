"""Batch-mode subscriptions batched in a sender process's memory, durable through Kafka offsets.

With ``delivery.engine = "senders"`` the matching query writes each batch-mode (event,
subscription) pair to the work topic like a streaming request, keyed by endpoint, so all
of a subscription's pairs reach one sender process, in order. That process gathers them
per subscription with the count-or-time :class:`~wayline.delivery.batch.Batcher` and sends
a batch when ``max_count`` pairs are gathered or ``max_wait`` has passed since the first.

No state store: what is gathered but not sent lives only in memory, and the work topic
keeps it. Each open batch *pins* the offset of its oldest pair in the partition it came
from, and the process commits a partition's offsets no further than its oldest pin
(:meth:`OpenBatches.commit_position`). A crash, a stop or a partition moving to another
process loses the open batches, and whoever reads the partition next reads their pairs
again from the committed offset. Delivery stays at-least-once; a batch re-formed with
the same events has the same webhook id, so the delivery log skips it if it was sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from wayline.delivery.batch import Batch, Batcher, BatchItem, BatchKey, BatchLimits

Partition = tuple[str, int]
"""A work topic partition: (topic, partition)."""


@dataclass(frozen=True, slots=True)
class HeldPair:
    """One batch-mode pair as the work topic carried it."""

    partition: Partition
    offset: int
    subscription_id: str
    endpoint_id: str
    item: BatchItem


@dataclass(frozen=True, slots=True)
class ReadyBatch:
    """A batch to send, and the endpoint it goes to."""

    batch: Batch
    endpoint_id: str


@dataclass(slots=True)
class _Open:
    partition: Partition
    endpoint_id: str
    offsets: deque[int] = field(default_factory=deque)
    """The offsets of the pairs still open, oldest first (the batcher's order)."""


class OpenBatches:
    """Each batch-mode subscription's open batch, and the offsets they pin."""

    def __init__(self, limits: Callable[[str], BatchLimits]) -> None:
        self._batcher = Batcher(limits)
        self._open: dict[BatchKey, _Open] = {}

    def add(self, pairs: Iterable[HeldPair], now: datetime) -> list[ReadyBatch]:
        """Gather ``pairs`` (in their partitions' order); the batches they fill."""
        ready: list[ReadyBatch] = []
        for key, run in _runs(pairs):
            first = run[0]
            opened = self._open.setdefault(key, _Open(first.partition, first.endpoint_id))
            opened.offsets.extend(pair.offset for pair in run)
            batches = self._batcher.add(key, [pair.item for pair in run], now)
            ready += (ReadyBatch(batch, opened.endpoint_id) for batch in batches)
            self._trim(key)
        return ready

    def due(self, now: datetime) -> list[ReadyBatch]:
        """Every open batch whose first pair has waited its ``max_wait``."""
        ready = []
        for batch in self._batcher.due(now):
            ready.append(ReadyBatch(batch, self._open[batch.key].endpoint_id))
            self._trim(batch.key)
        return ready

    def next_deadline(self) -> datetime | None:
        return self._batcher.next_deadline()

    def commit_position(self, partition: Partition, consumed: int) -> int:
        """How far ``partition`` may be committed, given that everything before ``consumed``
        has been taken: no further than the oldest pair an open batch holds."""
        pinned = [opened.offsets[0] for opened in self._open.values()
                  if opened.partition == partition and opened.offsets]
        return min([consumed, *pinned])

    def drop(self, partitions: Collection[Partition]) -> int:
        """Forget the open batches of ``partitions`` (revoked or rewound: their pairs are
        read again from the committed offsets); how many pairs were dropped."""
        dropped = 0
        for key in [key for key, opened in self._open.items() if opened.partition in partitions]:
            dropped += len(self._open.pop(key).offsets)
            self._batcher.forget(key)
        return dropped

    @property
    def pairs(self) -> int:
        """Pairs gathered and not yet sent."""
        return sum(len(opened.offsets) for opened in self._open.values())

    def _trim(self, key: BatchKey) -> None:
        """Keep the offsets of the pairs still open: the batcher sends from the front."""
        opened = self._open[key]
        left = self._batcher.pending(key)
        if not left:
            del self._open[key]
            return
        while len(opened.offsets) > left:
            opened.offsets.popleft()


def _runs(pairs: Iterable[HeldPair]) -> list[tuple[BatchKey, list[HeldPair]]]:
    """``pairs`` grouped by subscription and partition (keyed by endpoint, a subscription's
    pairs share one partition; if they ever did not, each partition pins its own), each
    group in arrival order."""
    groups: dict[BatchKey, list[HeldPair]] = {}
    for pair in pairs:
        groups.setdefault(BatchKey(pair.subscription_id, pair.partition[1]), []).append(pair)
    return list(groups.items())


__all__ = ["HeldPair", "OpenBatches", "Partition", "ReadyBatch"]
