"""What the jobs view shows: each job's Prometheus /metrics, read at the ports in settings.

A job reports its queries' last progress (``wayline.core.progress``): input rate, last
micro-batch duration, micro-batches run and lag per Kafka topic. Where a job does not (an
older build), the rate comes from its event counter between two readings (the console
keeps each job's previous one; the page re-reads every few seconds), the count from its
batch counter and the duration from its phase counters, averaged.

The jobs are read at once, each with its own short timeout, through one HTTP client: the
page waits for the slowest, not for their sum. The client (httpx, which loads rich for its
own command line) and the Prometheus parser are loaded at the first reading, not with the
console: a process that serves the console but never reads the jobs loads neither.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from threading import Lock
from typing import TYPE_CHECKING

from wayline.core.settings import Settings

if TYPE_CHECKING:
    import httpx

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class JobSpec:
    name: str
    address: Callable[[Settings], tuple[str, int]]
    events: str | None
    batches: str | None
    batch_seconds: str | None


PROGRESS_RATE = "wayline_query_input_rows_per_second"
PROGRESS_BATCH = "wayline_query_batch_seconds"
PROGRESS_BATCHES = "wayline_query_micro_batches"
PROGRESS_LAG = "wayline_source_lag_records"

JOBS = (
    JobSpec("delivery", lambda s: (s.delivery.metrics_host, s.delivery.metrics_port),
            "wayline_events", "wayline_micro_batches", "wayline_micro_batch_seconds"),
    JobSpec("retries", lambda s: (s.delivery.metrics_host, s.delivery.retry_metrics_port),
            "wayline_events", "wayline_micro_batches", "wayline_micro_batch_seconds"),
    JobSpec("rules", lambda s: (s.rules.metrics_host, s.rules.metrics_port),
            "wayline_rules_events", "wayline_rules_micro_batches", "wayline_rule_evaluation_seconds"),
    JobSpec("recon", lambda s: (s.recon.metrics_host, s.recon.metrics_port), None, None, None),
)


def parse(text: str) -> Samples:
    """Every sample by family name (a counter's ``_total`` suffix dropped); histograms keep
    their own suffixed names (``_bucket``, ``_sum``, ``_count``)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = family.name if sample.name in (family.name, f"{family.name}_total") else sample.name
            found[name].append((dict(sample.labels), float(sample.value)))
    return dict(found)


def total(samples: Samples, name: str | None) -> float | None:
    if name is None or name not in samples:
        return None
    return sum(value for _, value in samples[name])


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    summed: dict[str, float] = defaultdict(float)
    for labels, value in samples.get(name, ()):
        summed[labels.get(label, "")] += value
    return dict(summed)


UP, NOT_RUNNING, NOT_ANSWERING, UNKNOWN = "up", "not running", "not answering", "unknown"


@dataclass(frozen=True)
class JobStatus:
    name: str
    url: str | None
    state: str
    """:data:`UP`, :data:`NOT_RUNNING` (nothing listens at its metrics address),
    :data:`NOT_ANSWERING` (no usable answer) or :data:`UNKNOWN` (no address to ask)."""
    problem: str = ""
    events: float | None = None
    batches: float | None = None
    batch_s: float | None = None
    input_rate: float | None = None
    lag: dict[str, float] = field(default_factory=dict)
    samples: Samples = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.state == UP


def _refused(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _unreachable(exc: Exception, url: str, timeout_s: float) -> tuple[str, str]:
    """Why a job's metrics could not be read, in words (not the socket's errno)."""
    import httpx

    if _refused(exc):
        return NOT_RUNNING, f"nothing listens at {url}"
    if isinstance(exc, httpx.TimeoutException):
        return NOT_ANSWERING, f"cannot reach its metrics at {url}: no answer within {timeout_s:g} s"
    if isinstance(exc, httpx.HTTPStatusError):
        return NOT_ANSWERING, f"its metrics at {url} answered HTTP {exc.response.status_code}"
    if isinstance(exc, ValueError):
        return NOT_ANSWERING, f"its metrics at {url} are not Prometheus text"
    return NOT_ANSWERING, f"cannot reach its metrics at {url}"


class JobsWatch:
    """Reads the jobs' metrics; remembers the last reading of each to tell a rate."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._http: httpx.Client | None = None
        self._last: dict[str, tuple[float, float]] = {}
        self._lock = Lock()

    def read(self, spec: JobSpec, settings: Settings) -> JobStatus:
        import httpx

        host, port = spec.address(settings)
        if port == 0:
            return JobStatus(spec.name, None, UNKNOWN, "its metrics port is 0 (any free port): set one to see it here")
        url = f"http://{host}:{port}/metrics"
        with self._lock:
            if self._http is None:
                # One client for every reading: each new one builds a TLS context first, a third
                # of a second on a busy host, and the metrics are plain HTTP on the jobs' hosts.
                self._http = httpx.Client(timeout=self._timeout_s, trust_env=False)
            http = self._http
        try:
            answer = http.get(url)
            answer.raise_for_status()
            samples = parse(answer.text)
        except (httpx.HTTPError, ValueError) as exc:
            return JobStatus(spec.name, url, *_unreachable(exc, url, self._timeout_s))
        events, counted = total(samples, spec.events), total(samples, spec.batches)
        seconds = total(samples, spec.batch_seconds)
        counted_rate = self._rate(spec.name, events)
        reported_rate = total(samples, PROGRESS_RATE)
        # The count and the duration from the same source, the queries' progress, when there is one.
        reported_batches = total(samples, PROGRESS_BATCHES)
        last_batch = max((value for _, value in samples.get(PROGRESS_BATCH, ())), default=None)
        return JobStatus(
            spec.name, url, UP, events=events,
            batches=reported_batches if reported_batches is not None else counted,
            batch_s=last_batch if last_batch is not None else seconds / counted if seconds is not None and counted
            else None,
            input_rate=reported_rate if reported_rate is not None else counted_rate,
            lag=by_label(samples, PROGRESS_LAG, "topic"), samples=samples,
        )

    def _rate(self, job: str, events: float | None) -> float | None:
        if events is None:
            return None
        now = self._clock()
        with self._lock:
            before = self._last.get(job)
            self._last[job] = (now, events)
        if before is None or now <= before[0] or events < before[1]:
            return None
        return (events - before[1]) / (now - before[0])

    def read_all(self, settings: Settings) -> list[JobStatus]:
        with ThreadPoolExecutor(len(JOBS), thread_name_prefix="console-jobs") as pool:
            return list(pool.map(lambda spec: self.read(spec, settings), JOBS))


__all__ = [
    "JOBS", "NOT_ANSWERING", "NOT_RUNNING", "UNKNOWN", "UP", "JobSpec", "JobStatus", "JobsWatch", "Samples", "by_label",
    "parse", "total",
]
