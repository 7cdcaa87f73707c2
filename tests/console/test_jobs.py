"""Reading a job's Prometheus metrics for the jobs view: parsing, totals, the input rate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from wayline.console.jobs import JOBS, JobsWatch, by_label, parse, total
from wayline.core.metrics import serve_metrics
from wayline.core.settings import Settings
from wayline.stack.process import free_port


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


def test_a_job_not_listening_or_on_any_port_is_down_with_the_reason_in_words() -> None:
    watch = JobsWatch(timeout_s=1)
    port = free_port()
    down = watch.read(JOBS[0], Settings(delivery={"metrics_port": port}))
    assert (down.up, down.state, down.problem) == (False, "not running", f"nothing listens at {down.url}")
    anywhere = watch.read(JOBS[0], Settings(delivery={"metrics_port": 0}))
    assert not anywhere.up and anywhere.state == "unknown" and anywhere.url is None
    assert "port is 0" in anywhere.problem


class Reported(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield CounterMetricFamily("wayline_events", "", value=10)
        yield CounterMetricFamily("wayline_micro_batches", "", value=0)
        for name, value in (("wayline_query_input_rows_per_second", 250.0), ("wayline_query_batch_seconds", 0.4),
                            ("wayline_query_micro_batches", 42.0)):
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
    # The micro-batches its queries ran, from the same progress as the last one's duration.
    assert status.batches == 42


class Slow(BaseHTTPRequestHandler):
    """A /metrics that answers after ``server.delay_s``."""

    def do_GET(self) -> None:
        time.sleep(self.server.delay_s)  # type: ignore[attr-defined]
        body = exposition(Events()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def slow_jobs() -> Iterator[Callable[[float], int]]:
    servers: list[ThreadingHTTPServer] = []

    def start(delay_s: float) -> int:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
        server.daemon_threads = True
        server.delay_s = delay_s  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_jobs_are_read_at_once_so_the_page_waits_for_the_slowest_not_the_sum(slow_jobs) -> None:
    delay_s = 1.0
    ports = [slow_jobs(delay_s) for _ in JOBS]
    settings = Settings(delivery={"metrics_port": ports[0], "retry_metrics_port": ports[1]},
                        rules={"metrics_port": ports[2]}, recon={"metrics_port": ports[3]})
    started = time.monotonic()
    statuses = JobsWatch(timeout_s=3).read_all(settings)
    took = time.monotonic() - started
    assert [s.name for s in statuses] == [spec.name for spec in JOBS] and all(s.up for s in statuses)
    assert took < 2 * delay_s, f"{took:.2f} s: one after another would take {len(JOBS) * delay_s:.1f} s"


def test_a_job_that_does_not_answer_in_time_is_cut_off_with_the_reason(slow_jobs) -> None:
    port = slow_jobs(5.0)
    started = time.monotonic()
    hung = JobsWatch(timeout_s=0.3).read(JOBS[0], Settings(delivery={"metrics_port": port}))
    assert time.monotonic() - started < 2
    assert (hung.state, hung.problem) == (
        "not answering", f"cannot reach its metrics at {hung.url}: no answer within 0.3 s")
