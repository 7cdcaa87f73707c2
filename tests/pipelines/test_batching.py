"""Cutting batch-mode pairs into chunks in the JVM, against the pure-Python definitions."""

from __future__ import annotations

import pytest

from wayline.delivery.batch import shard_for

pytestmark = pytest.mark.integration

PAIRS_SCHEMA = ("event_id string, subscription_id string, endpoint_id string, max_count int, max_wait_ms int, "
                "body binary, events int")


def pairs(spark, rows: list[tuple[str, str, int]]):
    return spark.createDataFrame(
        [(event_id, sub, f"ep-{sub}", max_count, 1000, f'{{"id":"{event_id}"}}'.encode(), 1)
         for event_id, sub, max_count in rows],
        PAIRS_SCHEMA,
    )


def test_chunks_are_per_subscription_shard_sorted_and_at_most_max_count(spark) -> None:
    import orjson

    from wayline.delivery.bucket import Source
    from wayline.pipelines.batching import batch_work

    rows = [(f"e{n:03d}", "hot", 5) for n in range(97)] + [(f"c{n}", "cold", 50) for n in range(3)]
    rows.append(rows[0])  # the same pair twice in one micro-batch: one delivery
    work = batch_work(pairs(spark, rows), 4, "batching", Source("run-1", 7)).collect()

    shards = {}
    for row in work:
        ids = list(row["event_ids"])
        assert ids == sorted(ids)
        full = row["kind"] == "batch"
        assert len(ids) == 5 if full else len(ids) < {"hot": 5, "cold": 50}[row["subscription_id"]]
        (shard,) = {shard_for(e, 4) for e in ids}
        assert row["key"] is None if full else row["key"] == f"{row['subscription_id']}:{shard}".encode(), \
            "the JVM's shard is shard_for's"
        shards.setdefault(row["subscription_id"], []).append(shard)
        items = orjson.loads(row["body"]) if full else orjson.loads(row["body"])["bodies"]
        assert [orjson.loads(i) if isinstance(i, str) else i for i in items] == [{"id": e} for e in ids]
    hot = [r for r in work if r["subscription_id"] == "hot"]
    assert sorted(e for r in hot for e in r["event_ids"]) == [f"e{n:03d}" for n in range(97)]
    assert len(set(shards["hot"])) == 4, "a hot subscription spreads over every shard"
    assert sum(r["kind"] == "record" for r in hot) <= 4, "at most one leftover per shard"
    cold = [r for r in work if r["subscription_id"] == "cold"]
    assert sum(len(r["event_ids"]) for r in cold) == 3 and {r["kind"] for r in cold} == {"record"}
    assert sum(r["events"] for r in work) == len(rows), "every pair's count reaches the tasks once"


def test_full_chunks_become_cloudevents_batches_and_leftovers_bundles(spark) -> None:
    import orjson

    from wayline.delivery.bucket import Source
    from wayline.pipelines.batching import batch_work

    work = batch_work(pairs(spark, [(f"e{n}", "s", 2) for n in range(5)]), 1, "batching", Source("run-1", 7)).collect()
    batches = [w for w in work if w["kind"] == "batch"]
    bodies = sorted((orjson.loads(b["body"]) for b in batches), key=lambda events: events[0]["id"])
    assert bodies == [[{"id": "e0"}, {"id": "e1"}], [{"id": "e2"}, {"id": "e3"}]]
    (record,) = [w for w in work if w["kind"] == "record"]
    assert (record["topic"], record["key"]) == ("batching", b"s:0")
    value = orjson.loads(record["body"])
    assert (value["event_ids"], value["bodies"], value["run"], value["batch_id"]) == (["e4"], ['{"id":"e4"}'], "run-1", 7)
