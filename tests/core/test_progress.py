"""A query's progress as gauges: lag per Kafka topic from its offsets, without Spark."""

from __future__ import annotations

import orjson
from prometheus_client import CollectorRegistry, generate_latest

from wayline.core.progress import Collectors, QueryProgress, topic_lag


def kafka_source(end: dict, latest: dict) -> dict:
    # Spark reports a source's offsets as JSON text.
    return {"description": "KafkaV2[SubscribePattern[events\\..*]]", "endOffset": orjson.dumps(end).decode(),
            "latestOffset": orjson.dumps(latest).decode()}


def test_lag_is_latest_minus_end_summed_over_partitions_per_topic() -> None:
    progress = {"sources": [
        kafka_source({"events.a": {"0": 10, "1": 5}, "events.b": {"0": 7}},
                     {"events.a": {"0": 12, "1": 9}, "events.b": {"0": 7}, "events.c": {"0": 3}}),
        {"description": "RateStreamV2", "endOffset": "42", "latestOffset": None},
    ]}
    assert topic_lag(progress) == {"events.a": 6, "events.b": 0, "events.c": 3}
    assert topic_lag(None) == {} and topic_lag({"sources": []}) == {}


class Query:
    def __init__(self, progress: dict | None) -> None:
        self.lastProgress = progress


def scraped(collector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_the_gauges_follow_whichever_queries_run_now() -> None:
    progress = QueryProgress()
    assert "wayline_source_lag_records{" not in scraped(progress)
    running = [Query(None)]
    progress.watch(lambda: running)
    assert "wayline_query_input_rows_per_second{" not in scraped(progress)  # no micro-batch yet
    running.append(Query({"name": "wayline-delivery", "inputRowsPerSecond": 12.5, "batchDuration": 1500, "batchId": 41,
                          "sources": [kafka_source({"events.a": {"0": 1}}, {"events.a": {"0": 4}})]}))
    text = scraped(Collectors(progress))
    assert 'wayline_query_input_rows_per_second{query="wayline-delivery"} 12.5' in text
    assert 'wayline_query_batch_seconds{query="wayline-delivery"} 1.5' in text
    assert 'wayline_query_micro_batches{query="wayline-delivery"} 42.0' in text
    assert 'wayline_source_lag_records{query="wayline-delivery",topic="events.a"} 3.0' in text
