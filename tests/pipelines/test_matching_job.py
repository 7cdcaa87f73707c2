"""The senders engine's matching query end to end, under both triggers: events produced to
the real broker, the registry in the real PostgreSQL, the query's records read back from
the work, batch, quarantine and self-audit topics.

One scenario per trigger, in three acts:

1. valid events (one subscription in streaming mode, one in batch mode), an event no
   subscription wants and a malformed record: the exact records each topic gets, the
   requests byte-equal to what the micro-batch engine sends, and the batching query
   beside it making batches of the bundles;
2. a subscription added while the query runs: the running query routes to it, with the
   new version, without a restart; a subscription disabled: it gets nothing more;
3. the job stopped, events produced meanwhile, a new job started on the same checkpoint:
   every request is on the work topic (duplicates allowed, with the same headers).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Message, Producer

from tests.pipelines.test_delivery_crash import subscribe_single_and_batched
from tests.recon.streams import end_offsets, read_records
from tests.waiting import wait_for
from wayline.core.envelope import REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_TOPIC_HEADER
from wayline.core.errors import ConfigError
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery import work
from wayline.delivery.bucket import Source
from wayline.delivery.metrics import DeliveryMetrics
from wayline.pipelines.matching import RELOAD_S
from wayline.pipelines.matching_job import (
    MatchingJob,
    check_slots,
    chosen_trigger,
    cores_for,
    matching_records,
    slots_needed,
    source_partitions,
    with_enough_slots,
    with_matching_jvm,
)
from wayline.registry import subscription
from wayline.registry.access import ADMIN
from wayline.registry.endpoint import EndpointIn, EndpointService

BATCH = 4
RECEIVER = "http://127.0.0.1:9"  # never called: sending is the sender processes' part


def _settings(api_settings: Settings, trigger: str, name: str) -> Settings:
    return api_settings.model_copy(update={
        "kafka": api_settings.kafka.model_copy(update={
            "event_topic_prefix": f"events.{name}.", "alert_topic_prefix": f"alerts.{name}.",
        }),
        "delivery": api_settings.delivery.model_copy(update={
            "engine": "senders", "matching_trigger": trigger, "realtime_checkpoint_s": 5.0,
            "work_topic": f"wayline.work.{name}", "work_partitions": 2, "batch_topic": f"wayline.batching.{name}",
            "batch_shards": 1, "version_poll_s": 0.5,
        }),
    })


def _event(name: str, n: int, event_type: str, tenant: str) -> dict:
    return {"specversion": "1.0", "id": f"{name}-{n}", "source": "/mj", "type": event_type, "tenantid": tenant,
            "data": {"n": n}}


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def _headers(message: Message) -> dict[str, str]:
    return {key: value.decode() for key, value in message.headers() or []}


def _start(spark, settings: Settings, database, checkpoint: Path, metrics: DeliveryMetrics | None = None):
    job = MatchingJob(spark, settings, database, EndpointService.from_settings(settings), metrics or DeliveryMetrics(),
                      checkpoint).start()
    wait_for(lambda: job.exception() is not None or (job.matching.query is not None and job.matching.query.isActive),
             "the matching query to start")
    assert job.exception() is None, job.exception()
    return job


def _expected_requests(spark, settings: Settings, database, topic: str, folder: Path,
                       ) -> list[tuple[bytes, bytes, str, str]]:
    """What the micro-batch engine's sending tasks get for ``topic``'s records: each
    ``single`` request's (endpoint id, body, subscription id, event id)."""
    from wayline.pipelines.live_snapshot import load_live_snapshot
    from wayline.pipelines.routing import micro_batch_work

    live = load_live_snapshot(spark, database, EndpointService.from_settings(settings), folder)
    batch = (spark.read.format("kafka").option("kafka.bootstrap.servers", settings.kafka_bootstrap())
             .option("subscribe", topic).option("includeHeaders", "true").load())
    rows = micro_batch_work(batch, live, settings, Source("expected", 0)).where("kind = 'single'").collect()
    return sorted((r.endpoint_id.encode(), bytes(r.body), r.subscription_id, r.event_ids[0]) for r in rows)


def _sources(execution) -> list[str]:
    """The Java source of each whole-stage-generated stage of a query execution."""
    stages = execution.debug().codegenToSeq()
    return [stages.apply(n)._2() for n in range(stages.size())]


def _engine(settings: Settings, trigger: str, master: str = "local[2]", intake: str = "off") -> Settings:
    return settings.model_copy(update={
        "delivery": settings.delivery.model_copy(update={"engine": "senders", "matching_trigger": trigger,
                                                         "intake": intake}),
        "spark": settings.spark.model_copy(update={"master": master}),
    })


def test_a_real_time_query_needs_a_slot_per_partition_besides_the_other_queries(base_settings: Settings) -> None:
    realtime, micro = _engine(base_settings, "realtime"), _engine(base_settings, "micro_batch")
    # A spare slot beside the partitions', and shuffle_partitions (2) for each other query's stage.
    assert slots_needed(4, realtime) == 5
    assert slots_needed(4, realtime, beside=1) == 7
    assert slots_needed(4, micro) == 1


def test_auto_takes_the_real_time_trigger_only_where_the_cores_cover_the_partitions(base_settings: Settings) -> None:
    auto = _engine(base_settings, "auto")
    assert chosen_trigger(auto, partitions=1, cores=2) == "realtime"
    # The demo's 20 topics x 2 partitions, an ingest topic of 2, 500 topics: all on 2 cores.
    for partitions in (40, 2, 500):
        assert chosen_trigger(auto, partitions=partitions, cores=2) == "micro_batch"
    assert chosen_trigger(auto, partitions=40, cores=64) == "realtime"
    for asked in ("realtime", "micro_batch"):
        assert chosen_trigger(_engine(base_settings, asked), partitions=500, cores=2) == asked
    # A local master's slots run on this machine's cores, however many it names.
    assert cores_for("local[64]", 64) == min(64, os.cpu_count() or 1)
    assert cores_for("spark://127.0.0.1:7077", 64) == 64


def test_only_a_local_master_of_a_real_time_matching_query_is_raised(base_settings: Settings) -> None:
    # None of these asks Kafka how many partitions there are.
    micro_batch_engine = base_settings.model_copy(update={
        "delivery": base_settings.delivery.model_copy(update={"engine": "micro_batch"})})
    for unchanged in (micro_batch_engine, _engine(base_settings, "micro_batch"),
                      _engine(base_settings, "realtime", "spark://127.0.0.1:7077")):
        assert with_enough_slots(unchanged) is unchanged


def test_the_matching_jvm_takes_its_options_after_the_ones_every_job_takes(base_settings: Settings) -> None:
    every_job = base_settings.model_copy(update={
        "spark": base_settings.spark.model_copy(update={"java_options": "-Xss4m"})})
    assert with_matching_jvm(every_job).spark.java_options == "-Xss4m -XX:TieredStopAtLevel=1"
    assert with_matching_jvm(base_settings).spark.java_options == "-XX:TieredStopAtLevel=1"


def test_the_matching_jvm_has_a_heap_of_its_own_size(base_settings: Settings) -> None:
    sized = base_settings.model_copy(update={
        "delivery": base_settings.delivery.model_copy(update={"matching_driver_memory": "768m"})})
    assert with_matching_jvm(sized).spark.driver_memory == "768m"
    assert with_matching_jvm(base_settings).spark.driver_memory == "512m"
    assert base_settings.spark.driver_memory == "2g"  # every other job's


@pytest.mark.integration
def test_a_local_master_is_raised_to_the_slots_the_topics_need(settings: Settings, unique: str) -> None:
    name = f"mjs{unique}"
    on_topics = _engine(settings, "realtime").model_copy(update={"kafka": settings.kafka.model_copy(update={
        "event_topic_prefix": f"events.{name}.", "alert_topic_prefix": f"alerts.{name}."})})
    assert source_partitions(on_topics) == on_topics.kafka.topic_partitions  # no topic yet
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}.a", f"alerts.{name}.b"], 3)
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}x.other"], 5)  # another prefix: not read
    assert source_partitions(on_topics) == 6
    assert with_enough_slots(on_topics).spark.master == "local[7]"
    assert with_enough_slots(on_topics, beside=1).spark.master == "local[9]"
    # Chosen for the cores: 6 partitions on the test machine's few cores take micro-batches.
    chosen = with_enough_slots(_engine(on_topics, "auto"), beside=1)
    assert (chosen.delivery.matching_trigger, chosen.spark.master) == ("micro_batch", "local[2]")
    # Or, with the intake, the real-time trigger on the intake topic's partition (cores - 1).
    intake_topic = f"wayline.intake.{name}"
    fanned = _engine(on_topics, "auto", intake="auto")
    fanned = fanned.model_copy(update={"delivery": fanned.delivery.model_copy(update={"intake_topic": intake_topic})})
    chosen = with_enough_slots(fanned, beside=1)
    assert (chosen.delivery.intake, chosen.delivery.matching_trigger, chosen.spark.master) == (
        "on", "realtime", "local[4]")
    assert source_partitions(chosen) == 1 == len(end_offsets(settings.kafka_bootstrap(), [intake_topic])[intake_topic])


@pytest.mark.integration
def test_the_intake_topic_is_counted_once_the_broker_lists_it_not_taken_for_the_default(
        settings: Settings, unique: str) -> None:
    # On 500 source topics the intake topic, made a moment before, was not yet in the
    # metadata; the count fell back to kafka.topic_partitions (2), and the matching query
    # read the intake topic's one partition in micro-batches of 4 to 17 s.
    intake_topic = f"wayline.intake.mjc{unique}"
    fanned = _engine(settings, "auto", intake="on")
    fanned = fanned.model_copy(update={"delivery": fanned.delivery.model_copy(update={"intake_topic": intake_topic})})
    assert fanned.kafka.topic_partitions != 1
    later = threading.Timer(1.0, ensure_topics, (settings.kafka_bootstrap(), [intake_topic], 1))
    later.start()
    try:
        assert source_partitions(fanned) == 1
    finally:
        later.join()


@pytest.mark.integration
def test_the_retry_job_starting_beside_it_does_not_change_what_the_job_was_sized_for(
        settings: Settings, unique: str) -> None:
    # Issue 23, item 14: `wayline run retries` makes the operations topic, which the job
    # reads; made after the job counted its partitions, it left the job short of slots.
    name = f"mjo{unique}"
    operations = f"events.{name}.operations"
    on_topics = _engine(settings, "realtime").model_copy(update={
        "kafka": settings.kafka.model_copy(update={
            "event_topic_prefix": f"events.{name}.", "alert_topic_prefix": f"alerts.{name}."}),
        "delivery": _engine(settings, "realtime").delivery.model_copy(update={
            "operations_topic": operations, "work_topic": f"wayline.work.{name}",
            "batch_topic": f"wayline.batching.{name}"}),
    })
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}.a"], 1)
    sized = with_enough_slots(on_topics)
    ensure_topics(settings.kafka_bootstrap(), [operations], settings.kafka.topic_partitions)  # the retry job's start
    slots = int(sized.spark.master.removeprefix("local[").removesuffix("]"))
    assert source_partitions(on_topics) + 1 <= slots


@pytest.mark.integration
def test_a_real_time_query_that_would_take_every_slot_is_refused(spark, settings: Settings, unique: str) -> None:
    name = f"mjr{unique}"
    on_topics = _engine(settings, "realtime").model_copy(update={"kafka": settings.kafka.model_copy(update={
        "event_topic_prefix": f"events.{name}.", "alert_topic_prefix": f"alerts.{name}."})})
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}.a"], 1)
    check_slots(spark, on_topics)  # the test session's local[2]: one slot for it, one left
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}.b"], 1)
    with pytest.raises(ConfigError, match=r"reads 2 Kafka partitions .* Spark has 2: set spark.master to local\[3\]"):
        check_slots(spark, on_topics)
    check_slots(spark, _engine(on_topics, "micro_batch"))  # micro-batches take turns for slots


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_time_query_reads_long_before_its_first_batch_ends(
    spark, api_settings: Settings, database, unique: str, tmp_path: Path,
) -> None:
    # What is started after the matching query waits for its tasks at work, not for a
    # batch's end: a real-time batch reports its first progress only when it ends.
    name = f"mr{unique}"
    settings = _settings(api_settings, "realtime", name)
    settings = settings.model_copy(update={"delivery": settings.delivery.model_copy(update={
        "realtime_checkpoint_s": 300.0})})
    ensure_topics(settings.kafka_bootstrap(), [f"events.{name}.orders"], 1)
    job = _start(spark, settings, database, tmp_path / "checkpoint")
    try:
        assert job.wait_until_reading(120)
        assert job.matching.query.lastProgress is None
    finally:
        job.stop()


KAFKA_SCHEMA = ("key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, "
                "partition int, offset long, timestamp timestamp, timestampType int")


@pytest.mark.parametrize("real_time", [True, False])
def test_only_the_parse_and_the_counts_run_outside_whole_stage_code(spark, base_settings: Settings, tmp_path: Path,
                                                                   real_time: bool) -> None:
    # An operator outside whole-stage code evaluates its expressions node by node; a Generate
    # there evaluates all of a record's units so (the audit records' JSON, the quarantine
    # copies). `from_json` is never generated, and the metrics are an accumulator: those two.
    settings = base_settings.model_copy(update={"audit": base_settings.audit.model_copy(update={"enabled": True})})
    records = matching_records(spark.createDataFrame([], KAFKA_SCHEMA), tmp_path, settings, real_time=real_time)
    operators = [line.lstrip(" +-:") for line in str(records._jdf.queryExecution().executedPlan().toString()).splitlines()]
    outside = [op for op in operators if op and not op.startswith("*(")]
    assert [op.split(" ", 1)[0] for op in outside] == ["CollectMetrics", "Project"], outside
    assert "from_json" in outside[1] and "reflect" in outside[1]


@pytest.mark.integration
@pytest.mark.slow
def test_the_matching_query_runs_the_same_code_in_every_batch(
    spark, api_settings: Settings, database, unique: str, tmp_path: Path,
) -> None:
    # Code that differs between batches is compiled again in each: at every real-time
    # checkpoint, compiling was a quarter of the planning thread's time. The batch's clock
    # (the envelope's bound on event times, the self-audit records' time) made it differ.
    name = f"mc{unique}"
    settings = _settings(api_settings, "micro_batch", name)
    bootstrap = settings.kafka_bootstrap()
    topic = f"events.{name}.orders"
    ensure_topics(bootstrap, [topic], 1)
    event_type, tenant = f"{name}.order", f"{name}-t"
    subscribe_single_and_batched(database, EndpointService.from_settings(settings), RECEIVER, event_type, tenant, BATCH)
    executions: dict[int, object] = {}

    def three_batches_ended() -> bool:
        _produce(bootstrap, topic, [orjson.dumps(_event(name, len(executions), event_type, tenant))])
        query = job.matching.query
        execution = query._jsq.streamingQuery().lastExecution()
        if execution is not None:
            executions[execution.currentBatchId()] = execution
        ended = query.lastProgress["batchId"] if query.lastProgress else -1
        return sum(1 for batch in executions if batch <= ended) >= 3

    job = _start(spark, settings, database, tmp_path / "checkpoint")
    try:
        wait_for(three_batches_ended, "three batches")
        ended = job.matching.query.lastProgress["batchId"]
        # Read once each batch has ended (a plan is made as its batch runs): each stage's
        # Java source, without the plan it was made for (that names the batch's clock).
        codes = [_sources(executions[batch]) for batch in sorted(executions) if batch <= ended]
    finally:
        job.stop()
    first, *later = codes
    assert later == [first] * len(later)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("trigger", ["micro_batch", "realtime"])
def test_the_matching_query_writes_every_request_and_follows_the_registry(
    spark, api_settings: Settings, database, unique: str, trigger: str, tmp_path: Path,
) -> None:
    name = f"mj{unique}"
    settings = _settings(api_settings, trigger, name)
    bootstrap = settings.kafka_bootstrap()
    topic = f"events.{name}.orders"
    # One partition: a real-time query holds a task slot per source partition, and the
    # test session's Spark has two, shared with the batching query.
    ensure_topics(bootstrap, [topic], 1)
    event_type, tenant = f"{name}.order", f"{name}-t"
    endpoints = EndpointService.from_settings(settings)
    ids = subscribe_single_and_batched(database, endpoints, RECEIVER, event_type, tenant, BATCH)
    with database.transaction() as s:
        single = subscription.get(s, ADMIN, ids["single"])
        batched = subscription.get(s, ADMIN, ids["batched"])
    events = [_event(name, n, event_type, tenant) for n in range(6)]
    unwanted = _event(name, 99, f"{name}.nobody", tenant)
    _produce(bootstrap, topic, [*map(orjson.dumps, events), orjson.dumps(unwanted), b"not json"])
    version = database.current_version()

    checkpoint = tmp_path / "checkpoint"
    metrics = DeliveryMetrics()
    job = _start(spark, settings, database, checkpoint, metrics)
    try:
        assert job.wait_until_reading(60)

        # Act 1: the exact records.
        def routed(kind: str) -> list[Message]:
            return [m for m in read_records(bootstrap, settings.delivery.work_topic) if _headers(m)[work.KIND] == kind]

        wait_for(lambda: len(routed(work.SINGLE)) >= len(events), "the requests")
        requests = routed(work.SINGLE)
        assert sorted((m.key(), m.value(), _headers(m)[work.SUBSCRIPTION], _headers(m)[work.EVENT])
                      for m in requests) == _expected_requests(spark, settings, database, topic,
                                                               tmp_path / "expected")
        assert {m.key() for m in requests} == {single.endpoint_id.encode()}
        assert [orjson.loads(m.value()) for m in sorted(requests, key=lambda m: _headers(m)[work.EVENT])] == sorted(
            events, key=lambda e: e["id"])
        assert [_headers(m) for m in requests] == [{
            work.KIND: "single", work.SUBSCRIPTION: single.id, work.ENDPOINT: single.endpoint_id,
            work.EVENT: _headers(m)[work.EVENT], work.SOURCE: topic, work.VERSION: str(version),
        } for m in requests]
        assert [list(_headers(m)) for m in requests] == [list(work.HEADERS)] * len(requests)

        # Batch-mode pairs go the same way, for the sender processes to gather into batches.
        wait_for(lambda: len(routed(work.PAIR)) >= len(events), "the batch-mode pairs")
        pairs = sorted(routed(work.PAIR), key=lambda m: _headers(m)[work.EVENT])
        assert [(m.key(), orjson.loads(m.value()), _headers(m)) for m in pairs] == [
            (batched.endpoint_id.encode(), e, {
                work.KIND: "pair", work.SUBSCRIPTION: batched.id, work.ENDPOINT: batched.endpoint_id,
                work.EVENT: e["id"], work.SOURCE: topic, work.VERSION: str(version)})
            for e in sorted(events, key=lambda e: e["id"])]
        assert read_records(bootstrap, settings.delivery.batch_topic) == []

        def quarantined() -> list[Message]:
            return [m for m in read_records(bootstrap, settings.kafka.quarantine_topic)
                    if dict(m.headers() or []).get(SOURCE_TOPIC_HEADER) == topic.encode()]

        wait_for(lambda: quarantined(), "the quarantine copy")
        [copy] = quarantined()
        assert copy.value() == b"not json"
        assert _headers(copy)[REASON_HEADER] == "not_json" and _headers(copy)[SOURCE_OFFSET_HEADER] == "7"

        def audited(kind: str) -> list[dict]:
            return [orjson.loads(m.value())["data"] for m in read_records(bootstrap,
                                                                          getattr(settings.audit, f"{kind}_topic"))
                    if m.key().decode().startswith((topic, *ids.values()))]

        pairs = [f"{sub}/{e['id']}" for sub in ids.values() for e in events]
        wait_for(lambda: len(audited("consumed")) >= len(pairs) + 1, "the consumed records")
        # The filtered event (offset 6) is counted, not audited: only the quarantined record
        # is settled here.
        assert Counter(c["record"] for c in audited("consumed")) == Counter([*pairs, f"{topic}/0/7"])
        assert [(o["record"], o["outcome"], o["topic"]) for o in audited("outcomes")] == [
            (f"{topic}/0/7", "quarantined", topic)]

        # Act 2: the running query routes to a new subscription; a disabled one gets nothing more.
        with database.transaction() as s:
            added_endpoint = endpoints.create(s, ADMIN, EndpointIn(
                url=f"{RECEIVER}/added", customer_id=endpoints.get(s, ADMIN, single.endpoint_id).customer_id,
                secret=None))
            added = subscription.create(s, ADMIN, subscription.SubscriptionIn(
                endpoint_id=added_endpoint.id, event_types=[event_type]))
            subscription.update(s, ADMIN, single.id, subscription.SubscriptionPatch(enabled=False))
        changed = database.current_version()
        running = job.matching.query
        wait_for(lambda: job.registry_version == changed, "the new version's routing table", 60)
        # Its tasks look for a new table at most RELOAD_S apart: past that, they route with it.
        time.sleep(RELOAD_S * 1.5)
        assert job.exception() is None, job.exception()
        later = [_event(name, n, event_type, tenant) for n in range(10, 13)]
        _produce(bootstrap, topic, list(map(orjson.dumps, later)))

        def to_added() -> list[Message]:
            return [m for m in read_records(bootstrap, settings.delivery.work_topic) if m.key() == added_endpoint.id.encode()]

        wait_for(lambda: len(to_added()) >= len(later), "the added subscription's requests", 180)
        assert sorted(_headers(m)[work.EVENT] for m in to_added()) == [e["id"] for e in later]
        assert {(_headers(m)[work.SUBSCRIPTION], _headers(m)[work.VERSION]) for m in to_added()} == {
            (added.id, str(changed))}
        assert not [m for m in read_records(bootstrap, settings.delivery.work_topic)
                    if m.key() == single.endpoint_id.encode() and _headers(m)[work.EVENT] in {e["id"] for e in later}]
        assert job.matching.query is running and running.isActive, "followed without a restart"
    finally:
        job.stop()
    assert job.exception() is None, job.exception()
    # The delivery metrics count what the query's batches observed, each batch once; a
    # real-time batch stopped before its end reports nothing (the 3 later events' one).
    seen = metrics.totals()
    assert (seen.filtered, dict(seen.quarantined)) == (1, {"not_json": 1})
    assert seen.events in ({10} if trigger == "micro_batch" else {7, 10})

    # Act 3: events produced while it is stopped are routed by the job started on its checkpoint.
    meanwhile = [_event(name, n, event_type, tenant) for n in range(20, 24)]
    _produce(bootstrap, topic, list(map(orjson.dumps, meanwhile)))
    job = _start(spark, settings, database, checkpoint)
    try:
        wanted = {e["id"] for e in [*later, *meanwhile]}

        def routed() -> list[Message]:
            return [m for m in read_records(bootstrap, settings.delivery.work_topic) if m.key() == added_endpoint.id.encode()]

        wait_for(lambda: {_headers(m)[work.EVENT] for m in routed()} >= wanted, "the requests after the restart", 180)
        # Nothing lost; a copy routed again after the restart carries the same headers.
        assert {_headers(m)[work.EVENT] for m in routed()} == wanted
        by_event: dict[str, set] = {}
        for m in routed():
            by_event.setdefault(_headers(m)[work.EVENT], set()).add((m.value(), tuple(sorted(_headers(m).items()))))
        assert all(len(copies) == 1 for copies in by_event.values())
    finally:
        job.stop()
    assert job.exception() is None, job.exception()
