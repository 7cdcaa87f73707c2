"""The delivery-health chart's geometry: one bar per time bucket, its height the success
rate, a dot at its p95 latency. Plain numbers, drawn as inline SVG by the template."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from wayline.delivery.storage.attempt_log import HealthBucket

WIDTH, HEIGHT = 600, 120


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    rate_y: float  # top of the success-rate bar
    latency_y: float | None  # the p95 dot, scaled to the slowest bucket
    label: str


@dataclass(frozen=True)
class HealthChart:
    bars: list[Bar]
    attempts: int
    success_rate: float | None
    p95_ms: float | None
    width: int = WIDTH
    height: int = HEIGHT


def health_chart(buckets: list[HealthBucket], overall: HealthBucket | None, since: datetime, span: timedelta,
                 bucket: timedelta) -> HealthChart:
    slots = max(1, int(span / bucket))
    slot_width = WIDTH / slots
    slowest = max((b.p95_latency_ms or 0.0 for b in buckets), default=0.0)
    bars = []
    for b in buckets:
        slot = min(slots - 1, max(0, int((b.start - since) / bucket)))
        latency_y = None if b.p95_latency_ms is None or not slowest else HEIGHT * (1 - b.p95_latency_ms / slowest)
        bars.append(Bar(slot * slot_width, slot_width * 0.8, HEIGHT * (1 - b.success_rate), latency_y,
                        f"{b.start:%H:%M}: {b.succeeded}/{b.attempts} succeeded, p95 "
                        f"{b.p95_latency_ms or 0:.0f} ms"))
    if overall is None:
        return HealthChart(bars, 0, None, None)
    return HealthChart(bars, overall.attempts, overall.success_rate, overall.p95_latency_ms)


__all__ = ["Bar", "HealthChart", "health_chart"]
