"""A reconciliation's periods, in milliseconds of event time (``z``: of processing time).

- ``o``: the metrics interval. Windows are aligned to ``o`` from the Unix epoch, so a
  window's id is the same in every run and a re-emitted window replaces the earlier one.
- ``n``: the out-of-orderness allowed, and the time after which an expected id with no
  actual is reported missing. The watermark trails the newest event time by ``n``; an
  expected id at ``t`` is missing once the watermark reaches ``t + n``.
- ``m``: the correction window and the state retention. An id's state is kept until the
  watermark reaches ``t + m``: until then late records on either side still count; a
  record older than that is *too late* (counted, not matched).
- ``z``: if the watermark has not moved for this long in processing time, the clock moves
  on by the processing time that passed, so a stopped stream still reports missing ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from wayline.core.errors import RejectedInput

SECOND_MS = 1000
DAY_MS = 86_400 * SECOND_MS
# Bounds that keep a typo from becoming a week of state or a metric per millisecond.
BOUNDS_MS = {
    "o": (SECOND_MS, DAY_MS),
    "n": (1, DAY_MS),
    "m": (1, 7 * DAY_MS),
    "z": (SECOND_MS, DAY_MS),
}


@dataclass(frozen=True)
class Periods:
    o: int
    n: int
    m: int
    z: int

    def __post_init__(self) -> None:
        for name, (low, high) in BOUNDS_MS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise RejectedInput(f"periods.{name}: must be between {low / 1000:g} s and {high / 1000:g} s, "
                                    f"not {value / 1000:g} s")
        if self.n > self.m:
            raise RejectedInput(f"periods: n ({self.n / 1000:g} s) may not exceed m ({self.m / 1000:g} s): "
                                "an id must still be kept when it is reported missing")


def window_start(time_ms: int, o: int) -> int:
    """The start of the metric window holding ``time_ms`` (floor division: right before 1970 too)."""
    return time_ms // o * o


__all__ = ["BOUNDS_MS", "Periods", "window_start"]
