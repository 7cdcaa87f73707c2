"""How the console writes times and answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from wayline.console.formats import duration, http_status, time_span


def test_a_time_span_reads_as_dates_and_clock_times_in_utc() -> None:
    start = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)
    as_ms = int(start.timestamp() * 1000)
    assert time_span(as_ms, as_ms + 60_000) == "2026-11-24 14:00 – 14:01 UTC"
    assert time_span(start, start + timedelta(seconds=90)) == "2026-11-24 14:00 – 14:01:30 UTC"
    assert time_span(start, start + timedelta(hours=10)) == "2026-11-24 14:00 – 2026-11-25 00:00 UTC"
    # Another zone's time is written in UTC, as the page says.
    assert time_span(start.astimezone(timezone(timedelta(hours=2))), start + timedelta(minutes=5)) == \
        "2026-11-24 14:00 – 14:05 UTC"


def test_a_status_reads_with_its_name() -> None:
    assert (http_status(204), http_status(200), http_status(299)) == ("204 No Content", "200 OK", "299")


def test_a_wait_reads_in_the_unit_a_person_would_use() -> None:
    assert [duration(s) for s in (0, 0.5, 5, 59.5, 60, 90, 1800, 5400, 36000)] == [
        "0 s", "0.5 s", "5 s", "59.5 s", "1 min", "1 min 30 s", "30 min", "1 h 30 min", "10 h"]
