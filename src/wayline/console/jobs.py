"""What the jobs view shows: each job's Prometheus /metrics, read at the ports in settings.

A job reports its queries' last progress (``wayline.core.progress``): input rate, last
micro-batch duration and lag per Kafka topic. Where a job does not (an older build), the
rate comes from its event counter between two readings (the console keeps each job's
previous one; the page re-reads every few seconds) and the duration from its phase
counters, averaged.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import Lock

import httpx
from prometheus_client.parser import text_string_to_metric_families

from wayline.core.settings import Settings

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


@dataclass(frozen=True)
class JobStatus:
    name: str
    url: str | None
    up: bool
    problem: str = ""
    events: float | None = None
    batches: float | None = None
    batch_s: float | None = None
    input_rate: float | None = None
    lag: dict[str, float] = field(default_factory=dict)
    samples: Samples = field(default_factory=dict)


class JobsWatch:
    """Reads the jobs' metrics; remembers the last reading of each to tell a rate."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._last: dict[str, tuple[float, float]] = {}
        self._lock = Lock()

    def read(self, spec: JobSpec, settings: Settings) -> JobStatus:
        host, port = spec.address(settings)
        if port == 0:
            return JobStatus(spec.name, None, False, "its metrics port is 0 (any free port): set one to see it here")
        url = f"http://{host}:{port}/metrics"
        try:
            answer = httpx.get(url, timeout=self._timeout_s)
            answer.raise_for_status()
            samples = parse(answer.text)
        except (httpx.HTTPError, ValueError) as exc:
            return JobStatus(spec.name, url, False, f"not answering: {exc}")
        events, batches = total(samples, spec.events), total(samples, spec.batches)
        seconds = total(samples, spec.batch_seconds)
        counted_rate = self._rate(spec.name, events)
        reported_rate = total(samples, PROGRESS_RATE)
        last_batch = max((value for _, value in samples.get(PROGRESS_BATCH, ())), default=None)
        return JobStatus(
            spec.name, url, True, events=events, batches=batches,
            batch_s=last_batch if last_batch is not None else seconds / batches if seconds is not None and batches
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
        return [self.read(spec, settings) for spec in JOBS]


__all__ = ["JOBS", "JobSpec", "JobStatus", "JobsWatch", "Samples", "by_label", "parse", "total"]
