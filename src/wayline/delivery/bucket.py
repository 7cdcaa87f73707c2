"""A bucket: the batch keys one stateful-operator key holds, kept as one blob.

Python's stateful operators pay per key and per state call (a round trip to the JVM
each), so batch-mode state is coarse: the matching query hashes every batch key
(subscription, shard) into one of a few buckets, and a bucket holds the pending items of
all its keys in one value. The operator makes a handful of calls per bucket and
micro-batch: read the blob, write it back, move the bucket's one timer.

Items arrive as :class:`Bundle` s — one micro-batch's leftover events for one key, fewer
than its ``max_count`` (full batches were sent at once and never reach state). A bundle
names the matching query run and micro-batch that produced it; a micro-batch replayed
after a crash may hand the same bundle over again, and the bucket drops it by
remembering, per key, the newest micro-batch it took from that run. A key with nothing
pending is forgotten once it has been idle for ``remember``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import orjson

from wayline.delivery.batch import Batch, Batcher, BatchItem, BatchKey, BatchLimits, PendingState

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class Source:
    """Which matching query run and micro-batch produced a bundle."""

    run: str
    """The matching query's id: the same across restarts on one checkpoint."""
    batch_id: int


@dataclass(frozen=True, slots=True)
class Bundle:
    key: BatchKey
    endpoint_id: str
    limits: BatchLimits
    items: tuple[BatchItem, ...]
    source: Source


@dataclass(frozen=True, slots=True)
class ReadyBatch:
    batch: Batch
    endpoint_id: str


@dataclass(slots=True)
class _Key:
    endpoint_id: str
    limits: BatchLimits
    source: Source
    seen_at: datetime


class Bucket:
    """The pending batches of one bucket's keys; :meth:`dump` and :meth:`load` round-trip it."""

    def __init__(self, remember: timedelta) -> None:
        self._remember = remember
        self._keys: dict[BatchKey, _Key] = {}
        self._batcher = Batcher(self._limits_of)
        self._subscription_limits: dict[str, BatchLimits] = {}
        self.duplicates = 0
        """Bundles dropped because their micro-batch was handed over before."""

    def _limits_of(self, subscription_id: str) -> BatchLimits:
        return self._subscription_limits[subscription_id]

    def add(self, bundles: Iterable[Bundle], now: datetime) -> list[ReadyBatch]:
        """Take the bundles (in arrival order); return the batches now full or overdue."""
        ready: list[ReadyBatch] = []
        for bundle in bundles:
            known = self._keys.get(bundle.key)
            if known is not None and known.source.run == bundle.source.run and (
                bundle.source.batch_id <= known.source.batch_id
            ):
                self.duplicates += 1
                continue
            self._keys[bundle.key] = _Key(bundle.endpoint_id, bundle.limits, bundle.source, now)
            self._subscription_limits[bundle.key.subscription_id] = bundle.limits
            ready += self._ready(self._batcher.add(bundle.key, bundle.items, now))
        return ready

    def due(self, now: datetime) -> list[ReadyBatch]:
        """Every key whose first pending item has waited its ``max_wait``."""
        return self._ready(self._batcher.due(now))

    def wake_at(self) -> datetime | None:
        """When the bucket next needs a call: its earliest batch deadline, else when its
        oldest idle key may be forgotten; ``None`` when it holds nothing."""
        deadline = self._batcher.next_deadline()
        if deadline is not None:
            return deadline
        idle = [meta.seen_at for meta in self._keys.values()]
        return min(idle) + self._remember if idle else None

    def _ready(self, batches: list[Batch]) -> list[ReadyBatch]:
        return [ReadyBatch(batch, self._keys[batch.key].endpoint_id) for batch in batches]

    def dump(self, now: datetime) -> bytes | None:
        """The state to keep, or ``None`` when there is nothing worth keeping. Keys idle
        for ``remember`` are forgotten here."""
        keys = []
        for key, meta in list(self._keys.items()):
            pending = self._batcher.export(key)
            if pending is None and now - meta.seen_at >= self._remember:
                del self._keys[key]
                continue
            keys.append([
                key.subscription_id, key.shard, meta.endpoint_id, meta.limits.max_count,
                _ms(meta.limits.max_wait), meta.source.run, meta.source.batch_id, _epoch_ms(meta.seen_at),
                None if pending is None else [
                    _epoch_ms(pending.first_at), _epoch_ms(pending.deadline),
                    [item.event_id for item in pending.items],
                    [item.body.decode("utf-8") for item in pending.items],
                ],
            ])
        if not keys:
            return None
        return orjson.dumps({"format": _FORMAT, "keys": keys})

    @classmethod
    def load(cls, blob: bytes | None, remember: timedelta) -> Bucket:
        bucket = cls(remember)
        if blob is None:
            return bucket
        for (subscription_id, shard, endpoint_id, max_count, max_wait_ms, run, batch_id, seen_ms,
             pending) in orjson.loads(blob)["keys"]:
            key = BatchKey(subscription_id, shard)
            limits = BatchLimits(max_count, timedelta(milliseconds=max_wait_ms))
            bucket._keys[key] = _Key(endpoint_id, limits, Source(run, batch_id), _from_epoch_ms(seen_ms))
            bucket._subscription_limits[subscription_id] = limits
            if pending is not None:
                first_ms, deadline_ms, event_ids, bodies = pending
                items = tuple(BatchItem(i, body.encode("utf-8")) for i, body in zip(event_ids, bodies, strict=True))
                bucket._batcher.restore(key, PendingState(items, _from_epoch_ms(first_ms), _from_epoch_ms(deadline_ms)))
        return bucket


def _ms(delta: timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def _epoch_ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


def _from_epoch_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


__all__ = ["Bucket", "Bundle", "ReadyBatch", "Source"]
