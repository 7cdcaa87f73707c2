"""Reading a job's Prometheus metrics for the jobs view: parsing, totals, the input rate."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from wayline.console.jobs import JOBS, JobsWatch, by_label, parse, total
from wayline.core.metrics import serve_metrics
from wayline.core.settings import Settings


class Figures(Collector):
    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("wayline_events", "", value=120)
        phases = CounterMetricFamily("wayline_micro_batch_seconds", "", labels=["phase"])
        phases.add_metric(["match"], 1.5)
        phases.add_metric(["send"], 2.5)
        yield phases
        matches = CounterMetricFamily("wayline_rule_matches", "", labels=["rule_id", "rule"])
        matches.add_metric(["rule_a", "a"], 3)
        matches.add_metric(["rule_b", "b"], 4)
        yield matches


def exposition(collector: Collector) -> str:
    """What a job's /metrics answers (the text the console reads)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_counters_are_read_by_family_and_summed_over_labels() -> None:
    samples = parse(exposition(Figures()))
    assert total(samples, "wayline_events") == 120
    assert total(samples, "wayline_micro_batch_seconds") == 4.0
    assert total(samples, "wayline_missing") is None and total(samples, None) is None
    assert by_label(samples, "wayline_rule_matches", "rule_id") == {"rule_a": 3.0, "rule_b": 4.0}


class Events(Collector):
    def __init__(self) -> None:
        self.events = 0.0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("wayline_events", "", value=self.events)
        yield CounterMetricFamily("wayline_micro_batches", "", value=4)
        yield CounterMetricFamily("wayline_micro_batch_seconds", "", labels=["phase"])


@pytest.fixture
def served_events() -> Iterator[tuple[Events, int]]:
    events = Events()
    server = serve_metrics(events, "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
    try:
        yield events, server.server.server_port
    finally:
        server.close()


def test_the_input_rate_is_the_change_between_two_readings(served_events) -> None:
    events, port = served_events
    now = [100.0]
    watch = JobsWatch(timeout_s=2, clock=lambda: now[0])
    settings = Settings(delivery={"metrics_port": port})
    delivery = JOBS[0]
    first = watch.read(delivery, settings)
    assert first.up and (first.events, first.batches, first.input_rate) == (0, 4, None)
    events.events, now[0] = 50.0, 110.0
    second = watch.read(delivery, settings)
    assert second.input_rate == 5.0
    # A restarted job's counters start again: no negative rate.
    events.events, now[0] = 10.0, 120.0
    assert watch.read(delivery, settings).input_rate is None


def test_a_job_not_listening_or_on_any_port_is_down_with_the_reason(served_events) -> None:
    _, port = served_events
    watch = JobsWatch(timeout_s=1)
    down = watch.read(JOBS[0], Settings(delivery={"metrics_port": port + 1}))
    assert not down.up and "not answering" in down.problem
    anywhere = watch.read(JOBS[0], Settings(delivery={"metrics_port": 0}))
    assert not anywhere.up and anywhere.url is None and "port is 0" in anywhere.problem


class Reported(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield CounterMetricFamily("wayline_events", "", value=10)
        for name, value in (("wayline_query_input_rows_per_second", 250.0), ("wayline_query_batch_seconds", 0.4)):
            gauge = GaugeMetricFamily(name, "", labels=["query"])
            gauge.add_metric(["q"], value)
            yield gauge
        lag = GaugeMetricFamily("wayline_source_lag_records", "", labels=["query", "topic"])
        lag.add_metric(["q", "events.a"], 7)
        lag.add_metric(["q", "events.b"], 0)
        yield lag


def test_a_jobs_own_progress_gauges_win_over_counting() -> None:
    server = serve_metrics(Reported(), "127.0.0.1", 0, "WAYLINE_DELIVERY__METRICS_PORT")
    try:
        status = JobsWatch(timeout_s=2).read(JOBS[0], Settings(delivery={"metrics_port": server.server.server_port}))
    finally:
        server.close()
    assert (status.input_rate, status.batch_s, status.lag) == (250.0, 0.4, {"events.a": 7, "events.b": 0})
