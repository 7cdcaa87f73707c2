"""The health chart's geometry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from wayline.console.charts import HEIGHT, WIDTH, health_chart
from wayline.delivery.storage.attempt_log import HealthBucket

SINCE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SPAN, BUCKET = timedelta(hours=1), timedelta(minutes=5)


def test_each_bucket_is_a_bar_in_its_slot_as_high_as_its_success_rate() -> None:
    buckets = [HealthBucket(start=SINCE, attempts=4, succeeded=4, p95_latency_ms=100.0),
               HealthBucket(start=SINCE + 11 * BUCKET, attempts=4, succeeded=1, p95_latency_ms=400.0)]
    overall = HealthBucket(start=SINCE, attempts=8, succeeded=5, p95_latency_ms=390.0)
    chart = health_chart(buckets, overall, SINCE, SPAN, BUCKET)
    first, last = chart.bars
    assert (first.x, last.x) == (0, WIDTH * 11 / 12)
    assert (first.rate_y, last.rate_y) == (0, HEIGHT * 0.75)
    assert (first.latency_y, last.latency_y) == (HEIGHT * 0.75, 0)
    assert (chart.attempts, chart.success_rate, chart.p95_ms) == (8, 5 / 8, 390.0)
    assert "1/4 succeeded" in last.label


def test_no_attempts_is_an_empty_chart() -> None:
    empty = health_chart([], HealthBucket(start=SINCE, attempts=0, succeeded=0, p95_latency_ms=None),
                         SINCE, SPAN, BUCKET)
    assert (empty.bars, empty.attempts, empty.success_rate) == ([], 0, 1.0)


def test_the_axes_give_the_success_rate_the_slowest_p95_and_round_times() -> None:
    since = datetime(2026, 1, 1, 12, 7, 30, tzinfo=UTC)
    buckets = [HealthBucket(start=datetime(2026, 1, 1, 12, 5, tzinfo=UTC), attempts=2, succeeded=1,
                            p95_latency_ms=250.0),
               HealthBucket(start=datetime(2026, 1, 1, 12, 40, tzinfo=UTC), attempts=2, succeeded=2,
                            p95_latency_ms=100.0)]
    chart = health_chart(buckets, None, since, SPAN, BUCKET)
    assert [(t.at, t.label) for t in chart.rate_ticks] == [(HEIGHT, "0%"), (HEIGHT / 2, "50%"), (0, "100%")]
    assert [(t.at, t.label) for t in chart.latency_ticks] == [(HEIGHT, "0 ms"), (HEIGHT / 2, "125 ms"),
                                                              (0, "250 ms")]
    # Quarter hours where they fall in the hour since 12:07:30, not at its quarters.
    assert [(t.at, t.label) for t in chart.time_ticks] == [
        (WIDTH * 7.5 / 60, "12:15"), (WIDTH * 22.5 / 60, "12:30"), (WIDTH * 37.5 / 60, "12:45"),
        (WIDTH * 52.5 / 60, "13:00")]
    # Each bar at its own time on that axis; the bucket that began before ``since`` at the start.
    assert [bar.x for bar in chart.bars] == [0, WIDTH * 32.5 / 60]
    assert chart.outer_width > WIDTH and chart.outer_height > HEIGHT  # room for the labels


def test_no_latency_no_latency_axis() -> None:
    chart = health_chart([], None, SINCE, SPAN, BUCKET)
    assert chart.latency_ticks == [] and len(chart.rate_ticks) == 3 and len(chart.time_ticks) == 5
