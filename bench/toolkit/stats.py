"""Quantiles: one definition for every benchmark, the one the receiver
(``wayline.stack.receiver``) reports its latencies with.

The ``q`` quantile of ``n`` ordered values is the one at index ``floor(q * n)``, 0-based:
a value that was measured, never one interpolated between two. The median of an even
number of values is the upper of the middle two; the p99 of 100 values is the largest.
"""

from __future__ import annotations

from collections.abc import Sequence


def weighted_quantile(ordered: Sequence[tuple[float, int]], q: float) -> float | None:
    """The ``q`` quantile of values given in ascending order, each with how many times it
    occurs; None when there are none."""
    total = sum(n for _, n in ordered)
    seen = 0
    for value, n in ordered:
        seen += n
        if seen > q * total:
            return value
    return None


def quantile(ordered: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of values in ascending order; None when there are none."""
    return weighted_quantile([(value, 1) for value in ordered], q)
