import orjson, difflib
from confluent_kafka import Producer
from tests.pipelines.test_delivery_crash import subscribe_single_and_batched
from wayline.core.kafka import ensure_topics
from wayline.delivery.bucket import Source
from wayline.registry.endpoint import EndpointService


def test_diff(spark, api_settings, database, unique):
    from wayline.pipelines.live_snapshot import load_live_snapshot
    from wayline.pipelines.routing import micro_batch_work
    from wayline.pipelines.sending import as_work
    topic = f"events.cg.{unique}"
    bootstrap = api_settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic], 1)
    endpoints = EndpointService.from_settings(api_settings)
    subscribe_single_and_batched(database, endpoints, "http://127.0.0.1:1", "cg.t", "cg", 4)
    live = load_live_snapshot(spark, database, endpoints)
    session = spark.newSession()
    session.conf.set("spark.sql.adaptive.enabled", "false")
    texts = []
    for i in range(2):
        batch = (session.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("includeHeaders", "true").load())
        work = as_work(micro_batch_work(batch, live, api_settings, Source("run", 0)))
        plan = work._jdf.queryExecution().executedPlan()
        texts.append(spark._jvm.org.apache.spark.sql.execution.debug.package.codegenString(plan))
    diff = [l for l in difflib.unified_diff(texts[0].splitlines(), texts[1].splitlines(), lineterm="", n=0)]
    print("DIFFLINES", len(diff))
    print("\n".join(diff[:80]))
