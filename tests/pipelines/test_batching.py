"""Cutting batch-mode pairs into chunks in the JVM, against the pure-Python definitions."""

from __future__ import annotations

import pytest

from wayline.delivery.batch import shard_for

pytestmark = pytest.mark.integration

PAIRS_SCHEMA = "id string, subscription_id string, endpoint_id string, max_count int, max_wait_ms int, body binary"


def pairs(spark, rows: list[tuple[str, str, int]]):
    return spark.createDataFrame(
        [(event_id, sub, f"ep-{sub}", max_count, 1000, f'{{"id":"{event_id}"}}'.encode()) for event_id, sub, max_count in rows],
        PAIRS_SCHEMA,
    )


def test_chunks_are_per_subscription_shard_sorted_and_at_most_max_count(spark) -> None:
    from wayline.pipelines.batching import chunk_batch_pairs

    rows = [(f"e{n:03d}", "hot", 5) for n in range(97)] + [(f"c{n}", "cold", 50) for n in range(3)]
    rows.append(rows[0])  # the same pair twice in one micro-batch: one delivery
    chunks = chunk_batch_pairs(pairs(spark, rows), shards=4).collect()

    for chunk in chunks:
        assert len(chunk["event_ids"]) <= chunk["max_count"]
        assert chunk["full"] == (len(chunk["event_ids"]) == chunk["max_count"])
        assert list(chunk["event_ids"]) == sorted(chunk["event_ids"])
        assert {shard_for(e, 4) for e in chunk["event_ids"]} == {chunk["shard"]}, "the JVM's shard is shard_for's"
        assert chunk["bodies"] == [f'{{"id":"{e}"}}' for e in chunk["event_ids"]]
    hot = [c for c in chunks if c["subscription_id"] == "hot"]
    assert sorted(e for c in hot for e in c["event_ids"]) == [f"e{n:03d}" for n in range(97)]
    assert len({c["shard"] for c in hot}) == 4, "a hot subscription spreads over every shard"
    assert sum(not c["full"] for c in hot) <= 4, "at most one leftover per shard"
    cold = [c for c in chunks if c["subscription_id"] == "cold"]
    assert sum(len(c["event_ids"]) for c in cold) == 3 and not any(c["full"] for c in cold)


def test_full_chunks_become_cloudevents_batches_and_leftovers_bundles(spark) -> None:
    import orjson

    from wayline.delivery.bucket import Source
    from wayline.pipelines.batching import bundles, chunk_batch_pairs, full_batches

    chunks = chunk_batch_pairs(pairs(spark, [(f"e{n}", "s", 2) for n in range(5)]), shards=1)
    batches = full_batches(chunks).collect()
    bodies = sorted((orjson.loads(b["body"]) for b in batches), key=lambda events: events[0]["id"])
    assert bodies == [[{"id": "e0"}, {"id": "e1"}], [{"id": "e2"}, {"id": "e3"}]]
    assert {b["kind"] for b in batches} == {"batch"}
    (record,) = bundles(chunks, "batching", Source("run-1", 7)).collect()
    assert (record["topic"], record["key"]) == ("batching", "s:0")
    value = orjson.loads(record["value"])
    assert (value["event_ids"], value["bodies"], value["run"], value["batch_id"]) == (["e4"], ['{"id":"e4"}'], "run-1", 7)
