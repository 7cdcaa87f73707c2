"""A streaming job's progress as Prometheus gauges: input rate, last micro-batch duration, how
many micro-batches it has run and, per Kafka topic, how many records the job is behind the
latest offsets (its lag).

Spark reports these in each query's last progress; this collector reads them at scrape
time from whatever queries the job runs now (a job restarts its query on a new plan), so
it holds no state of its own and imports no Spark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    """A Kafka source's offsets ({topic: {partition: offset}}); {} for any other source's."""
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {}
    if not isinstance(raw, dict):
        return {}
    return {topic: {str(p): int(o) for p, o in partitions.items() if isinstance(o, int)}
            for topic, partitions in raw.items() if isinstance(partitions, dict)}


def topic_lag(progress: Mapping[str, Any] | None) -> dict[str, int]:
    """Per topic, the records between where the last micro-batch ended and the latest offsets."""
    lag: dict[str, int] = defaultdict(int)
    for source in (progress or {}).get("sources") or ():
        done = _offsets(source.get("endOffset"))
        for topic, partitions in _offsets(source.get("latestOffset")).items():
            for partition, latest in partitions.items():
                lag[topic] += max(0, latest - done.get(topic, {}).get(partition, 0))
    return dict(lag)


class QueryProgress(Collector):
    """Gauges from the last progress of the queries ``watch`` names (none until then)."""

    def __init__(self) -> None:
        self._queries: Callable[[], Iterable[Any]] = list

    def watch(self, queries: Callable[[], Iterable[Any]]) -> None:
        self._queries = queries

    def collect(self) -> Iterator[Metric]:
        labels = ["query"]
        rate = GaugeMetricFamily("wayline_query_input_rows_per_second", "Input rate of the last micro-batch",
                                 labels=labels)
        duration = GaugeMetricFamily("wayline_query_batch_seconds", "Wall time of the last micro-batch",
                                     labels=labels)
        batches = GaugeMetricFamily("wayline_query_micro_batches",
                                    "Micro-batches run since the query's checkpoint began (last batch id + 1)",
                                    labels=labels)
        lag = GaugeMetricFamily("wayline_source_lag_records",
                                "Records behind the latest offsets, per Kafka topic, after the last micro-batch",
                                labels=["query", "topic"])
        for query in list(self._queries()):
            progress = query.lastProgress
            if not progress:
                continue
            name = str(progress.get("name") or "query")
            rate.add_metric([name], float(progress.get("inputRowsPerSecond") or 0.0))
            duration.add_metric([name], float((progress.get("batchDuration") or 0) / 1000))
            batches.add_metric([name], float(int(progress.get("batchId") or 0) + 1))
            for topic, behind in sorted(topic_lag(progress).items()):
                lag.add_metric([name, topic], behind)
        yield from (rate, duration, batches, lag)


class Collectors(Collector):
    """Several collectors served as one."""

    def __init__(self, *parts: Collector) -> None:
        self._parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part.collect()


__all__ = ["Collectors", "QueryProgress", "topic_lag"]
