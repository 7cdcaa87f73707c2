"""A group's stored state, ``GroupState``: how the rules engine encodes what it keeps.

Per rule, numpy columns over the partition keys (``RuleState``: wake times, sizes, where
each key's own state is), and the keys' own states in segments: one pickle per snapshot of
the keys that changed, decoded only when one of their keys is visited
(``wayline.rules.engine`` evaluates the rules; ``RuleKeys`` is one rule's keys as it runs).

The rules job pickles a ``GroupState`` into its state store, and pickle records a class by
its module: blobs written before this module existed name ``wayline.rules.engine``, which
therefore still exports ``GroupState`` and ``RuleState``.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# A key's wake time when only rows can wake it.
_NEVER = np.iinfo(np.int64).max
# The columns of a rule's keys besides the keys themselves, with their empty values.
_COLUMNS = {"wake": _NEVER, "sizes": 0, "barrier": False, "last": 0, "segment": -1, "index": -1}
_TYPES = {"barrier": np.bool_}


@dataclass
class RuleState:
    """One rule's state in a group as stored: columns over its partition keys.

    ``wake``: epoch µs at which the watermark wakes the key (``_NEVER``: only rows can);
    ``sizes``: entries held (state budgets, metrics); ``barrier``: the key holds rows no
    variable accepts only, the latest at ``last`` (µs); ``segment`` and ``index``: where the
    key's own state (its matcher's or window's ``snapshot()``) is among the group's segments.
    """

    keys: list[str]
    columns: dict[str, np.ndarray]


@dataclass
class GroupState:
    """What ``GroupEvaluator.snapshot()`` returns: per rule its columns, and the segments.

    A segment is one pickle of the states of the keys (of every rule) that changed before
    one snapshot: rows that several rules keep are encoded once. A segment is decoded only
    when one of its keys is visited, and dropped once no key refers to it.
    """

    rules: dict[str, RuleState]
    segments: list[bytes]
    lengths: list[int]  # each segment's number of entries


class Segments:
    """A group's segments (``GroupState``), decoded on first use."""

    def __init__(self, encoded: Sequence[bytes], lengths: Sequence[int]) -> None:
        self.encoded: list[bytes] = list(encoded)
        self.lengths: list[int] = list(lengths)
        self.decoded: dict[int, list[Any]] = {}

    def state(self, segment: int, index: int) -> Any:
        states = self.decoded.get(segment)
        if states is None:
            states = self.decoded[segment] = pickle.loads(self.encoded[segment])
        return states[index]

    def referring(self, rules: Sequence[RuleKeys]) -> np.ndarray:
        """How many keys refer to each segment."""
        counts = np.zeros(len(self.encoded), dtype=np.int64)
        for keys in rules:
            used = keys.columns["segment"][:len(keys.keys)]
            counts += np.bincount(used[used >= 0], minlength=len(counts))
        return counts

    def renumber(self, rules: Sequence[RuleKeys]) -> None:
        """Drop the segments no key refers to, and forget what was decoded: the keys that
        needed it are built."""
        kept = np.flatnonzero(self.referring(rules)).tolist()
        if len(kept) < len(self.encoded):
            number = np.full(len(self.encoded), -1, dtype=np.int64)
            number[kept] = np.arange(len(kept))
            for keys in rules:
                column = keys.columns["segment"][:len(keys.keys)]
                column[column >= 0] = number[column[column >= 0]]
            self.encoded = [self.encoded[old] for old in kept]
            self.lengths = [self.lengths[old] for old in kept]
        self.decoded = {}


class RuleKeys:
    """One rule's partition keys in a group: the columns of ``RuleState``, and the keys built.

    ``live`` holds the keys' matchers, windows or barriers once built (decoded, or made by a
    visit); ``dirty`` those changed since the last snapshot, the only ones it re-encodes.
    A forgotten key leaves a dead slot (key None), dropped at the next snapshot.
    """

    def __init__(self, segments: Segments, stored: RuleState | None = None) -> None:
        self.segments = segments
        self.keys: list[str | None] = list(stored.keys) if stored is not None else []
        self.slots: dict[str, int] = dict(zip(self.keys, range(len(self.keys)), strict=True))  # type: ignore[arg-type]
        self.columns = _empty_columns(len(self.keys))
        if stored is not None:
            for name, column in self.columns.items():
                column[:len(self.keys)] = stored.columns[name]
        self.live: dict[str, Any] = {}
        self.dirty: set[str] = set()
        self.dead = 0

    def _slot(self, key: str) -> int:
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = len(self.keys)
            self.keys.append(key)
            if slot == len(self.columns["wake"]):
                old, self.columns = self.columns, _empty_columns(slot)
                for name, column in self.columns.items():
                    column[:slot] = old[name]
        return slot

    def built(self, key: str) -> Any:
        """The key's live object, None if it has none yet."""
        return self.live.get(key)

    def stored(self, key: str) -> Any:
        """The key's state as last encoded, decoded; None for a key without state."""
        slot = self.slots.get(key)
        if slot is None or self.columns["segment"][slot] < 0:
            return None
        return self.segments.state(int(self.columns["segment"][slot]), int(self.columns["index"][slot]))

    def is_barrier(self, key: str) -> bool:
        slot = self.slots.get(key)
        return slot is not None and bool(self.columns["barrier"][slot])

    def passed(self, key: str, watermark: int | None) -> bool:
        """Whether the watermark has passed every row of a barrier key."""
        return watermark is not None and bool(self.columns["last"][self.slots[key]] < watermark)

    def size(self, key: str) -> int:
        slot = self.slots.get(key)
        return int(self.columns["sizes"][slot]) if slot is not None else 0

    def keep(self, key: str, live: Any, size: int, wake: int | None, last: int | None = None) -> None:
        """The key's state is ``live`` now; ``last``: the latest row of a barrier key."""
        slot = self._slot(key)
        self.live[key] = live
        self.dirty.add(key)
        columns = self.columns
        columns["sizes"][slot] = size
        columns["wake"][slot] = _NEVER if wake is None else wake
        columns["barrier"][slot] = last is not None
        columns["last"][slot] = last or 0

    def forget(self, key: str) -> None:
        slot = self.slots.pop(key, None)
        if slot is None:
            return
        self.keys[slot] = None
        for name, empty in _COLUMNS.items():
            self.columns[name][slot] = empty
        self.live.pop(key, None)
        self.dirty.discard(key)
        self.dead += 1

    def due(self, watermark: int | None) -> list[str]:
        """Keys to visit without new rows: those whose wake time the watermark has reached."""
        if watermark is None:
            return []
        keys = self.keys
        return [keys[slot] for slot in np.flatnonzero(self.columns["wake"][:len(keys)] <= watermark).tolist()]  # type: ignore[misc]

    @property
    def total(self) -> int:
        return int(self.columns["sizes"][:len(self.keys)].sum())

    @property
    def wake_at(self) -> int | None:
        if not self.keys:
            return None
        wake = int(self.columns["wake"][:len(self.keys)].min())
        return None if wake == _NEVER else wake

    def compact(self) -> None:
        """Drop the dead slots."""
        if not self.dead:
            return
        alive = [slot for slot, key in enumerate(self.keys) if key is not None]
        self.keys = [self.keys[slot] for slot in alive]
        self.slots = dict(zip(self.keys, range(len(alive)), strict=True))  # type: ignore[arg-type]
        old, self.columns = self.columns, _empty_columns(len(alive))
        for name, column in self.columns.items():
            column[:len(alive)] = old[name][alive]
        self.dead = 0

    def stored_state(self) -> RuleState:
        count = len(self.keys)
        return RuleState(list(self.keys), {name: column[:count].copy() for name, column in self.columns.items()})  # type: ignore[arg-type]


def _empty_columns(count: int) -> dict[str, np.ndarray]:
    """Empty columns with room for ``count`` keys and as many again."""
    capacity = max(16, 2 * count)
    return {name: np.full(capacity, empty, dtype=_TYPES.get(name, np.int64)) for name, empty in _COLUMNS.items()}


def from_key_dicts(state: Mapping[str, Mapping[str, Any]]) -> GroupState:
    """A group's state in the layout before ``GroupState`` (per rule, one plain-data entry
    per key): one segment; the keys wake at the first watermark (epoch 0), whose visit
    learns their sizes and wake times."""
    rules, states = {}, []
    for state_key, keys in state.items():
        count = len(keys)
        columns = {name: np.full(count, empty, dtype=_TYPES.get(name, np.int64)) for name, empty in _COLUMNS.items()}
        columns["wake"][:] = 0
        columns["segment"][:] = 0
        columns["index"][:] = np.arange(len(states), len(states) + count)
        states.extend(keys.values())
        rules[state_key] = RuleState(list(keys), columns)
    return GroupState(rules, [pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)], [len(states)])


def encode(segments: Segments, by_rule: Mapping[str, RuleKeys]) -> GroupState:
    """Every rule's state that has keys, as ``GroupEvaluator.snapshot()`` returns it. The keys
    changed since the last snapshot go to a new segment, with those of segments that less
    than half of their entries still refer to (rewritten rather than kept for a few keys); a
    segment no key refers to is dropped."""
    rules = list(by_rule.values())
    for keys in rules:
        keys.compact()
    referring = segments.referring(rules)
    sparse = {number for number, (count, length) in enumerate(zip(referring.tolist(), segments.lengths, strict=True))
              if 0 < 2 * count < length}
    fresh: list[Any] = []
    for keys in rules:
        column = keys.columns["segment"]
        moved = [key for key in map(keys.keys.__getitem__, np.flatnonzero(np.isin(
            column[:len(keys.keys)], list(sparse))).tolist()) if key not in keys.dirty] if sparse else []
        for key in moved:
            live = keys.live.get(key)
            fresh.append(live.snapshot() if live is not None else keys.stored(key))
            keys.columns["index"][keys.slots[key]] = len(fresh) - 1
        for key in keys.dirty:
            fresh.append(keys.live[key].snapshot())
            keys.columns["index"][keys.slots[key]] = len(fresh) - 1
        for key in (*moved, *keys.dirty):
            column[keys.slots[key]] = len(segments.encoded)
        keys.dirty.clear()
    if fresh:
        segments.encoded.append(pickle.dumps(fresh, protocol=pickle.HIGHEST_PROTOCOL))
        segments.lengths.append(len(fresh))
    segments.renumber(rules)
    return GroupState({state_key: keys.stored_state() for state_key, keys in by_rule.items() if keys.keys},
                      list(segments.encoded), list(segments.lengths))  # type: ignore[arg-type]


__all__ = ["GroupState", "RuleKeys", "RuleState", "Segments", "encode", "from_key_dicts"]
