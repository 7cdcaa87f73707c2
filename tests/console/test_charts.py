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
