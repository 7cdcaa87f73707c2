"""What a reconciler reports, as plain values: the figures it keeps per (source, window),
and the ids it calls missing or found.

Apart from the reconciler (``state``, which needs numpy, pandas and pyarrow), so that what
stores, publishes and shows these values (``store``, ``events``, the admin API) loads none
of them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal


@dataclass
class Counts:
    expected: int = 0
    matched: int = 0
    missing: int = 0
    found: int = 0
    duplicates: int = 0
    late: int = 0
    too_late: int = 0
    unreadable: int = 0

    def add(self, other: Counts) -> None:
        for name in COUNT_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in COUNT_NAMES)


COUNT_NAMES = tuple(f.name for f in fields(Counts))


@dataclass(frozen=True)
class Emitted:
    kind: Literal["missing", "found"]
    id: str
    source: str
    expected_time: int
    actual_time: int | None
    watermark: int


__all__ = ["COUNT_NAMES", "Counts", "Emitted"]
