"""Which group of the rules job's stateful operator a partition key's rows go to.

The operator is keyed by (key_spec, shard): a shard holds many partition keys
(``hash(key) % shards``), because the Python stateful operator pays per group and per state
call. Spark then sends each group to the task ``pmod(hash(key_spec, shard), partitions)``
(its hash partitioning: Murmur3, seed 42). With 64 shards the tasks got 33 and 31 groups of
the bench's key spec; with few shards, numbered 0 to n - 1, they did not: 8 shards went 7
to one task and 1 to the other. A balanced layout therefore numbers a key spec's shards with
values Spark spreads evenly over the partitions (``shard_values``), and has few of them: each
group costs its state calls, a timer, a blob written whole, a pass through PySpark's
per-group machinery, whatever its number of rows (docs/benchmarks.md, issue 27,
"Fewer, balanced stateful groups").

The layout is part of the state: a partition key's rows must keep meeting its state in
the same group. So a checkpoint keeps the layout it was started with (``checkpoint_layout``,
a small file beside Spark's own), and one written before layouts were recorded keeps the one
it had: shards 0 to n - 1, with ``rules.shards`` as configured, 64 unless set. The layout
holds the shuffle partition count too: the balanced values depend on it, and Spark keeps a
stateful query at the count its checkpoint started with whatever the settings say later.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

# The shard count before balanced layouts, and the default ``rules.shards`` then.
LEGACY_SHARDS = 64
LAYOUT_FILE = "wayline-shards.json"

_MASK = 0xFFFFFFFF
_SEED = 42  # Spark's hash() and HashPartitioning


def _rotate(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def _mix_k(k: int) -> int:
    return (_rotate((k * 0xCC9E2D51) & _MASK, 15) * 0x1B873593) & _MASK


def _mix_h(h: int, k: int) -> int:
    return (_rotate(h ^ k, 13) * 5 + 0xE6546B64) & _MASK


def _finish(h: int, length: int) -> int:
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def _hash_bytes(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes``: whole words, then each trailing byte alone (signed)."""
    h = seed
    aligned = len(data) - len(data) % 4
    for start in range(0, aligned, 4):
        h = _mix_h(h, _mix_k(int.from_bytes(data[start:start + 4], "little")))
    for byte in data[aligned:]:
        h = _mix_h(h, _mix_k((byte - 256 if byte > 127 else byte) & _MASK))
    return _finish(h, len(data))


def spark_hash(spec: str, shard: int) -> int:
    """Spark SQL's ``hash(spec, shard)`` for a string and an int, as a signed 32-bit int."""
    h = _hash_bytes(spec.encode("utf-8"), _SEED)
    h = _finish(_mix_h(h, _mix_k(shard & _MASK)), 4)
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_of(spec: str, shard: int, partitions: int) -> int:
    """The shuffle partition (the task) Spark sends the group (spec, shard) to."""
    return spark_hash(spec, shard) % partitions


def shard_values(spec: str, shards: int, partitions: int) -> tuple[int, ...]:
    """``shards`` shard values for ``spec`` that Spark spreads over ``partitions`` tasks as
    evenly as they divide: the first values, from 0 up, that fill each partition's share."""
    room = [shards // partitions + (1 if partition < shards % partitions else 0) for partition in range(partitions)]
    chosen: list[int] = []
    value = 0
    while len(chosen) < shards:
        partition = partition_of(spec, value, partitions)
        if room[partition]:
            room[partition] -= 1
            chosen.append(value)
        value += 1
    return tuple(chosen)


@dataclass(frozen=True)
class ShardLayout:
    """How many shards each key spec has, over how many shuffle partitions (tasks), and
    whether they are numbered to balance those tasks."""

    shards: int
    partitions: int
    balanced: bool = True

    def values(self, spec: str) -> tuple[int, ...]:
        """The shard values of ``spec``'s groups, in the order ``hash(key) % shards`` picks them."""
        return shard_values(spec, self.shards, self.partitions) if self.balanced else tuple(range(self.shards))


def checkpoint_layout(checkpoint: Path, configured: ShardLayout, legacy: ShardLayout) -> ShardLayout:
    """The layout of the state in ``checkpoint``: the one recorded there; ``legacy`` for a
    checkpoint a query wrote before layouts were recorded; otherwise ``configured``, recorded
    now, before the query writes any state. A record written before it held the partition
    count (2026-12-08) takes ``configured``'s: the settings it was started with, unless changed."""
    record = checkpoint / LAYOUT_FILE
    if record.exists():
        return ShardLayout(**{"partitions": configured.partitions, **json.loads(record.read_text())})
    if (checkpoint / "offsets").exists():
        return legacy
    checkpoint.mkdir(parents=True, exist_ok=True)
    written = record.with_suffix(".tmp")
    written.write_text(json.dumps(asdict(configured)))
    written.replace(record)  # whole or absent, whenever the job stops
    return configured


__all__ = ["LAYOUT_FILE", "LEGACY_SHARDS", "ShardLayout", "checkpoint_layout", "partition_of", "shard_values",
           "spark_hash"]
