"""Fixed window rules in the JVM: the same output events as the Python path, and a running
job that restarts its aggregation for a new window rule without losing or repeating windows."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer
from sqlalchemy import delete

from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.rules.engine import ActiveRule, GroupEvaluator, cloudevent
from wayline.rules.rule import compile_rule

pytestmark = [pytest.mark.integration]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
RULES = [
    "SELECT data.user, window.start AS start, window.end AS end, COUNT(*) AS n, SUM(data.amount) AS total, "
    "AVG(data.amount) AS mean, MIN(data.amount) AS low, MAX(data.amount * 2) AS high, COUNT(data.note) AS notes "
    "FROM events WHERE type = 'order' AND data.amount >= 10 "
    "GROUP BY data.user, window(event_time, '1 minute') HAVING COUNT(*) >= 2",
    "SELECT data.user, window.start AS start, SUM(data.amount) AS total FROM events WHERE type IN ('order', 'refund') "
    "GROUP BY data.user, window(event_time, '3 minutes', '1 minute') HAVING SUM(data.amount) > 100 OR COUNT(*) = 1",
    "SELECT window.end AS end, COUNT(*) AS n, MAX(data.amount) AS top FROM events "
    "GROUP BY window(event_time, '2 minutes')",
]


def _events(count: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    out = []
    for n in range(count):
        data: dict[str, Any] = {"user": f"u{rng.randrange(4)}", "amount": rng.randrange(60)}
        if rng.random() < 0.3:
            data["note"] = "x"
        out.append({"id": f"e{n}", "type": rng.choice(["order", "order", "refund", "view"]),
                    "tenantid": f"t{n % 3}", "event_time": T0 + timedelta(seconds=7 * n + rng.random()),
                    "data": data})
    return out


def _normal(event: dict[str, Any]) -> dict[str, Any]:
    """An output event with times as datetimes and numbers as floats, to compare the paths."""
    def value(item: Any) -> Any:
        if isinstance(item, str) and item[:2] == "20" and "T" in item:
            return datetime.fromisoformat(item)
        return float(item) if isinstance(item, int) else item
    return {**event, "time": value(event["time"]), "data": {k: value(v) for k, v in event["data"].items()}}


def test_the_jvm_emits_what_the_python_path_emits(spark: Any) -> None:
    from pyspark.sql import functions as F

    from wayline.pipelines.windows import window_outputs

    events = _events(200)
    rules = [ActiveRule(f"w{i}", 1, f"win{i}", compile_rule(sql), "out", "alert", 10_000, 60_000)
             for i, sql in enumerate(RULES)]
    assert all(rule.compiled.aggregation is not None for rule in rules)

    expected = []
    for rule in rules:
        # Events in time order, so that "the window's newest event" is its last one for both paths.
        key = (lambda e: orjson.dumps([e["data"]["user"]]).decode()) if rule.compiled.partition_key else (lambda e: "[]")
        evaluator = GroupEvaluator([rule])
        evaluator.process([(key(e), e) for e in events], None)
        emitted = evaluator.process([], T0 + timedelta(days=1)).emitted
        expected += [orjson.loads(orjson.dumps(cloudevent(e), default=str)) for e in emitted]

    frame = spark.createDataFrame(
        [(e["id"], e["type"], e["tenantid"], orjson.dumps(e["data"]).decode(), e["event_time"]) for e in events],
        "id string, type string, tenantid string, data_json string, event_time timestamp",
    ).select("id", "type", "tenantid", F.parse_json("data_json").alias("data"), "event_time")
    rows = window_outputs(frame, rules, 0).collect()
    got = [orjson.loads(row.out_value) for row in rows]

    assert len(expected) > 20
    # The tenant is compared below: Python takes the key's last event so far, which may lie
    # in a later window; the JVM the window's newest event, as the rules' documentation says.
    assert sorted((_normal(e) | {"tenantid": None} for e in got), key=lambda e: e["id"]) == \
        sorted((_normal(e) | {"tenantid": None} for e in expected), key=lambda e: e["id"])
    for output in (e for e in got if e["source"] == "wayline.rules/win2"):
        end = datetime.fromisoformat(output["time"])
        newest = max((e for e in events if end - timedelta(minutes=2) <= e["event_time"] < end),
                     key=lambda e: e["event_time"])
        assert output["tenantid"] == newest["tenantid"]
    assert {row.out_rule for row in rows} == {rule.state_key for rule in rules}
    assert all(row.out_key == orjson.loads(row.out_value).get("subject") for row in rows)


def test_however_many_rules_there_is_one_aggregation(spark: Any) -> None:
    from pyspark.sql import functions as F

    from wayline.pipelines.windows import window_outputs

    rules = [ActiveRule(f"m{i}", 1, f"many{i}", compile_rule(RULES[i % len(RULES)]), "out", "alert", 10, 1000)
             for i in range(30)]
    frame = spark.createDataFrame([("e", "order", "t", '{"user": "u", "amount": 1}', T0)],
                                  "id string, type string, tenantid string, data_json string, event_time timestamp")
    outputs = window_outputs(frame.select("id", "type", "tenantid", F.parse_json("data_json").alias("data"),
                                          "event_time"), rules, 0)
    # Each aggregation in the plan would be a stateful operator of its own in the stream.
    assert outputs._jdf.queryExecution().optimizedPlan().toString().count("Aggregate [") == 1


@pytest.mark.slow
def test_a_new_window_rule_restarts_the_aggregation_on_its_checkpoint(settings: Settings, spark: Any, database: Any,
                                                                      tmp_path: Any, unique: str) -> None:
    from dataclasses import replace

    from wayline.pipelines.rules_job import RulesJob
    from wayline.registry import rule as rule_service
    from wayline.registry.access import ADMIN
    from wayline.registry.models import Rule

    prefix = f"events.win{unique}."
    topic_in, topic_out = prefix + "in", f"win.out.{unique}"
    job_settings = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix}),
        "rules": settings.rules.model_copy(update={"allowed_lateness_s": 0.0, "version_poll_s": 0.2, "shards": 4}),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic_in, topic_out], 1)
    policy = rule_service.RulePolicy.from_settings(settings)

    def deploy(name: str, sql: str) -> None:
        with database.transaction() as session:
            rule_service.create(session, ADMIN, rule_service.RuleIn(
                name=f"{name}-{unique}", sql=sql, output_topic=topic_out, output_type=f"alert.{name}"),
                replace(policy))

    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(*records: tuple[str, int, str], kind: str = "order") -> None:
        for event_id, seconds, user in records:
            producer.produce(topic_in, value=orjson.dumps({
                "specversion": "1.0", "id": event_id, "source": "tests", "type": kind, "tenantid": "t",
                "time": (T0 + timedelta(seconds=seconds)).isoformat(), "data": {"user": user, "amount": 5}}))
        producer.flush(30)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"win-{unique}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_out])
    seen: list[dict[str, Any]] = []

    def drained() -> list[dict[str, Any]]:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen.append(orjson.loads(message.value()))
        return seen

    with database.transaction() as session:
        session.execute(delete(Rule))
    deploy("first", "SELECT data.user, COUNT(*) AS n FROM events WHERE type = 'order' "
                    "GROUP BY data.user, window(event_time, '1 minute')")
    job = RulesJob(spark, job_settings, database, tmp_path / "ckpt").start()
    try:
        produce(("a1", 1, "u1"), ("a2", 2, "u1"), ("a3", 30, "u2"), ("clock1", 61, "u9"))
        wait_for(lambda: job.raise_if_failed() or len(drained()) >= 2, "the first windows", timeout_s=180)
        deploy("second", "SELECT data.user, SUM(data.amount) AS total FROM events WHERE type = 'order' "
                         "GROUP BY data.user, window(event_time, '1 minute')")
        # The job reads the registry before a micro-batch: one event no rule uses brings one,
        # which still runs on the old plan and asks for the restart.
        wait_for(job.rereads_registry, "the registry's poll interval")
        produce(("ping", 61, "u8"), kind="ping")
        wait_for(lambda: job.raise_if_failed() or job.counters.restarts == 1, "the restart", timeout_s=120)
        # u1 at 62 s goes into both rules' second window (the second rule saw none of the
        # events before the restart: u9's first window is only the first rule's); 5 s is
        # behind the watermark (61 s): dropped as late, and no window is emitted twice.
        produce(("b1", 62, "u1"), ("late", 5, "u1"), ("clock2", 125, "u9"))
        wait_for(lambda: job.raise_if_failed() or len({e["type"] for e in drained()}) == 2
                 and sum(e["subject"] == "u1" for e in seen) >= 3, "both rules' second windows", timeout_s=180)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            drained()
    finally:
        job.stop()
        consumer.close()
    summary = sorted((e["type"], e["subject"], e["time"], e["data"].get("n"), e["data"].get("total")) for e in seen)
    assert summary == [
        ("alert.first", "u1", "2026-03-01T09:01:00Z", 2, None),
        ("alert.first", "u1", "2026-03-01T09:02:00Z", 1, None),
        ("alert.first", "u2", "2026-03-01T09:01:00Z", 1, None),
        ("alert.first", "u9", "2026-03-01T09:02:00Z", 1, None),
        ("alert.second", "u1", "2026-03-01T09:02:00Z", None, 5.0),
    ]
    assert len({e["id"] for e in seen}) == len(seen)
