"""One delivery micro-batch in one Spark job: records read from the real broker, the
registry in the real PostgreSQL, requests received by a real HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from aiohttp import web
from confluent_kafka import Producer

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder
from tests.pipelines.test_delivery_crash import subscribe_single_and_batched
from tests.recon.streams import read_all
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.bucket import Source
from wayline.registry.endpoint import EndpointService

pytestmark = pytest.mark.integration

EVENT_TYPE = "routing.t"
BATCH = 4


def test_a_micro_batch_is_one_spark_job_and_its_counts_add_up(spark, api_settings: Settings, database, unique,
                                                              tmp_path) -> None:
    from wayline.delivery.stage import StageSettings
    from wayline.pipelines.delivery import deliver_micro_batch, ensure_delivery_topics
    from wayline.pipelines.live_snapshot import load_live_snapshot
    from wayline.pipelines.sending import PartitionSender, task_settings

    one_shard = api_settings.model_copy(update={
        "delivery": api_settings.delivery.model_copy(update={"batch_shards": 1})})
    topic = f"events.routing.{unique}"
    bootstrap = api_settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic], 1)  # one partition: offsets name the records below
    ensure_delivery_topics(api_settings)
    endpoints = EndpointService.from_settings(api_settings)
    recorder = Recorder()

    async def ok(request: web.Request) -> web.Response:
        await recorder.record(request)
        return web.Response(status=204)

    events = [{"specversion": "1.0", "id": f"{unique}-{n}", "source": "/r", "type": EVENT_TYPE, "tenantid": "rt",
               "data": {"n": n}} for n in range(10)]
    unwanted = {**events[0], "id": f"{unique}-other", "type": "routing.nobody"}
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in [*map(orjson.dumps, events), orjson.dumps(unwanted), b"not json", orjson.dumps(events[3])]:
        producer.produce(topic, value)
    assert producer.flush(30) == 0

    with Receivers() as receivers:
        base = receivers.serve({"/single": ok, "/batched": ok})
        ids = subscribe_single_and_batched(database, endpoints, base, EVENT_TYPE, "rt", BATCH)
        live = load_live_snapshot(spark, database, endpoints, tmp_path / "routing")
        # A session of its own: a micro-batch sets its session's conf, as in its query's clone.
        batch = (spark.newSession().read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("includeHeaders", "true").load())
        sender = PartitionSender(live.targets, task_settings(api_settings), StageSettings(deadline_s=5))
        group = f"routing-{unique}"
        spark.sparkContext.setJobGroup(group, "one micro-batch")
        try:
            summary = deliver_micro_batch(batch, Source("run", 1), live, one_shard, sender)
        finally:
            spark.sparkContext.setJobGroup("", "")
        tracker = spark.sparkContext.statusTracker()
        jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]

    # One job, which reads the records (its stages: read and route, shuffle, send); the
    # routes come from the routing table's file, not from a broadcast job.
    [job] = jobs
    assert len(job.stageIds) > 1
    assert (summary.events, summary.filtered, dict(summary.quarantined)) == (12, 1, {"not_json": 1})
    # 10 distinct events: 10 streaming requests (the copy of event 3 is skipped), and in
    # batch mode 2 full batches of 4 sent now, 2 events held for the batching query.
    assert summary.held == 2
    assert sorted(r.path for r in recorder.requests) == ["/batched"] * 2 + ["/single"] * 10

    # The self-audit: every unit consumed, and the outcome of each one settled here (the
    # 2 held events' outcome comes from the batching query, not run here).
    def ours(kind: str) -> list[dict]:
        return [e["data"] for e in read_all(bootstrap, getattr(api_settings.audit, f"{kind}_topic"))
                if e["data"]["record"].startswith((topic, *ids.values()))]

    consumed, outcomes = ours("consumed"), ours("outcomes")
    pairs = {f"{sub}/{e['id']}" for sub in ids.values() for e in events}
    # The filtered event (offset 10) is counted above, not audited.
    assert Counter(c["record"] for c in consumed) == Counter(
        [*pairs, f"{ids['single']}/{unique}-3", f"{ids['batched']}/{unique}-3", f"{topic}/0/11"])
    settled = {o["record"]: o["outcome"] for o in outcomes}
    assert len(outcomes) == len(settled) == 10 + 8 + 1, "one outcome per unit"
    assert settled[f"{topic}/0/11"] == "quarantined"
    assert {r for r, outcome in settled.items() if outcome == "delivered"} < pairs
    assert all(o["topic"] == topic for o in outcomes if o["record"].startswith((topic, ids["single"])))
