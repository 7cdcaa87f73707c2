"""The delivery-health chart's geometry: one bar per time bucket, its height the success
rate, a dot at its p95 latency; a success-rate axis on the left, a latency axis on the
right and the time along the bottom. Plain numbers, drawn as inline SVG by the template."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from wayline.delivery.storage.attempt_log import HealthBucket

WIDTH, HEIGHT = 480, 120
"""The plot area; the bars and dots are placed in it, from its top left corner."""
LEFT, RIGHT, TOP, BOTTOM = 56, 84, 12, 34
"""Room around the plot area for the axes' labels (at the larger size a phone shows them)."""
TIME_TICKS = 4
"""The time axis is labelled this many times over the span (every 15 minutes of an hour)."""


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    rate_y: float  # top of the success-rate bar
    latency_y: float | None  # the p95 dot, scaled to the slowest bucket
    label: str


@dataclass(frozen=True)
class Tick:
    at: float  # x on the time axis, y on the others, in the plot area
    label: str


@dataclass(frozen=True)
class HealthChart:
    bars: list[Bar]
    attempts: int
    success_rate: float | None
    p95_ms: float | None
    rate_ticks: list[Tick]
    latency_ticks: list[Tick]
    time_ticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP

    @property
    def outer_width(self) -> int:
        return LEFT + self.width + RIGHT

    @property
    def outer_height(self) -> int:
        return TOP + self.height + BOTTOM


def _time_ticks(since: datetime, span: timedelta) -> list[Tick]:
    step = span / TIME_TICKS
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    # Round times (14:15, 14:30), not since + a quarter: each label reads at a glance.
    at = epoch + -((since - epoch) // -step) * step
    ticks = []
    while at <= since + span:
        ticks.append(Tick(WIDTH * ((at - since) / span), f"{at.astimezone(UTC):%H:%M}"))
        at += step
    return ticks


def health_chart(buckets: list[HealthBucket], overall: HealthBucket | None, since: datetime, span: timedelta,
                 bucket: timedelta) -> HealthChart:
    bar_width = WIDTH * (bucket / span) * 0.8
    slowest = max((b.p95_latency_ms or 0.0 for b in buckets), default=0.0)
    bars = []
    for b in buckets:
        # At its time on the time axis; the bucket that began before ``since`` at its start.
        x = min(WIDTH - bar_width, max(0.0, WIDTH * ((b.start - since) / span)))
        latency_y = None if b.p95_latency_ms is None or not slowest else HEIGHT * (1 - b.p95_latency_ms / slowest)
        bars.append(Bar(x, bar_width, HEIGHT * (1 - b.success_rate), latency_y,
                        f"{b.start:%H:%M}: {b.succeeded}/{b.attempts} succeeded, p95 "
                        f"{b.p95_latency_ms or 0:.0f} ms"))
    rate_ticks = [Tick(HEIGHT * (1 - share), f"{share:.0%}") for share in (0.0, 0.5, 1.0)]
    latency_ticks = [Tick(HEIGHT * (1 - share), f"{slowest * share:.0f} ms") for share in (0.0, 0.5, 1.0)] \
        if slowest else []
    axes = {"rate_ticks": rate_ticks, "latency_ticks": latency_ticks, "time_ticks": _time_ticks(since, span)}
    if overall is None:
        return HealthChart(bars, 0, None, None, **axes)
    return HealthChart(bars, overall.attempts, overall.success_rate, overall.p95_latency_ms, **axes)


__all__ = ["BOTTOM", "HEIGHT", "LEFT", "RIGHT", "TOP", "WIDTH", "Bar", "HealthChart", "Tick", "health_chart"]
