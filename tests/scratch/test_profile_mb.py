import time, orjson
from aiohttp import web
from confluent_kafka import Producer
from tests.delivery.receivers import Receivers
from tests.pipelines.test_delivery_crash import subscribe_single_and_batched
from wayline.core.kafka import ensure_topics
from wayline.delivery.bucket import Source
from wayline.registry.endpoint import EndpointService


def test_profile(spark, api_settings, database, unique):
    from wayline.delivery.stage import StageSettings
    from wayline.pipelines.delivery import deliver_micro_batch, ensure_delivery_topics
    from wayline.pipelines.live_snapshot import load_live_snapshot
    from wayline.pipelines.sending import PartitionSender, task_settings
    topic = f"events.prof.{unique}"
    bootstrap = api_settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic], 1)
    ensure_delivery_topics(api_settings)
    endpoints = EndpointService.from_settings(api_settings)
    async def ok(request):
        await request.read()
        return web.Response(status=204)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(3000):
        producer.produce(topic, orjson.dumps({"specversion": "1.0", "id": f"{unique}-{n}", "source": "/r", "type": "prof.t", "tenantid": "pt", "data": {"n": n}}))
    producer.flush(30)
    with Receivers() as receivers:
        base = receivers.serve({"/single": ok, "/batched": ok})
        subscribe_single_and_batched(database, endpoints, base, "prof.t", "pt", 4)
        live = load_live_snapshot(spark, database, endpoints)
        sender = PartitionSender(live.targets, task_settings(api_settings), StageSettings(deadline_s=5))
        session = spark.newSession()
        for audit in (True, False):
            settings = api_settings.model_copy(update={"audit": api_settings.audit.model_copy(update={"enabled": audit})})
            for i in range(5):
                start, end = i * 300, (i + 1) * 300
                batch = (session.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                         .option("startingOffsets", orjson.dumps({topic: {"0": start}}).decode())
                         .option("endingOffsets", orjson.dumps({topic: {"0": end}}).decode())
                         .option("includeHeaders", "true").load())
                hist = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
                c0, s0 = hist.getCount(), sum(hist.getSnapshot().getValues())
                t = time.perf_counter()
                summary = deliver_micro_batch(batch, Source("run", i), live, settings, sender)
                c1, s1 = hist.getCount(), sum(hist.getSnapshot().getValues())
                print("AUDIT", audit, "batch", i, round(time.perf_counter() - t, 3), dict(summary.phase_seconds), summary.events, "compiles", c1 - c0, "ms", s1 - s0)
