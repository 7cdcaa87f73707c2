"""Join rules end to end: deployed through the admin API into the rules job, events on the
real broker, the reference table in the real PostgreSQL, outputs read back from Kafka.

- a stream-table enrichment (LEFT JOIN reference.<table>), whose table changes through the
  API while the rule runs: events after the change see the new rows, without a restart;
- an interval join of orders and payments within ten minutes, inner and LEFT OUTER (an
  order no payment met is emitted once the watermark passes its interval).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from tests.pipelines.test_rules import Outputs, event
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENRICH = ("SELECT e.id, e.data.amount AS amount, c.data.tier AS tier FROM events e "
          "LEFT JOIN reference.{table} c ON c.key = e.data.customer WHERE e.type = 'jn.order'")
PAID = ("SELECT a.id AS order_id, b.id AS payment_id, a.data.amount AS amount FROM events a {how} events b "
        "ON a.data.order = b.data.order AND b.type = 'jn.payment' "
        "AND b.event_time BETWEEN a.event_time AND a.event_time + INTERVAL '10' MINUTE WHERE a.type = 'jn.order'")


@pytest.fixture(scope="module")
def joined(settings: Settings, spark, database, admin_api: str, admin_key: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from wayline.pipelines.rules_job import RulesJob

    suffix = str(time.time_ns())[-8:]
    prefix = f"events.jn{suffix}."
    table = f"customers_{suffix}"
    out = {name: f"rules.out.join-{name}.{suffix}" for name in ("enrich", "inner", "outer", "broken")}
    job_settings = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix}),
        # Records of one produce call reach the two partitions at different times, so a
        # micro-batch may see a payment before an earlier order: the lateness covers the
        # stream's whole span, and the clock event at the end moves the watermark past it.
        "rules": settings.rules.model_copy(update={"allowed_lateness_s": 1800.0, "version_poll_s": 0.5}),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [prefix + "in"], 2)
    ensure_topics(bootstrap, list(out.values()), 1)
    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(records: list[tuple[str, bytes]]) -> None:
        for key, value in records:
            producer.produce(prefix + "in", key=key.encode(), value=value)
        assert producer.flush(30) == 0

    def put_rows(rows: list[dict[str, Any]]) -> None:
        response = api.put(f"/reference-tables/{table}/rows", json=rows)
        assert response.status_code == 200, response.text

    assert api.post("/reference-tables", json={"name": table}).status_code == 201
    put_rows([{"key": "c1", "data": {"tier": "gold"}}, {"key": "c2", "data": {"tier": "silver"}}])
    rules = {}
    # ANSI mode raises on a division by zero: this rule's query fails in the JVM.
    broken = ENRICH.format(table=table).replace("WHERE", "WHERE e.data.amount / (e.data.amount - e.data.amount) > 0 AND")

    job = RulesJob(spark, job_settings, database, tmp_path_factory.mktemp("joins") / "rules").start()
    outputs = Outputs(bootstrap, list(out.values()))
    try:
        wait_for(lambda: job.query is not None and job.query.lastProgress is not None, "the rules query", 240)
        # Deployed into the running job, which starts a query per join rule.
        for name, sql in (("enrich", ENRICH.format(table=table)), ("inner", PAID.format(how="JOIN")),
                          ("outer", PAID.format(how="LEFT JOIN")), ("broken", broken)):
            response = api.post("/rules", json={"name": f"join-{name}-{suffix}", "sql": sql,
                                                "output_topic": out[name], "output_type": f"join.{name}"})
            assert response.status_code == 201, response.text
            rules[name] = response.json()

        def started() -> bool:
            # The job reads the registry before a micro-batch: an event makes one, until every
            # join query has started. A join query reads from the latest offsets: produce once
            # each has run a batch.
            job.raise_if_failed()
            if len(job.joins.queries) == 4 and all(q.lastProgress is not None for q in job.joins.queries.values()):
                return True
            produce([("warm", event(f"warm-{time.monotonic_ns()}", "jn.warm", 0, {}))])
            return False

        wait_for(started, "the join queries", 240, every_s=1)
        produce([
            ("c1", event("o1", "jn.order", 0, {"customer": "c1", "amount": 10, "order": "k1"})),
            ("c2", event("o2", "jn.order", 1, {"customer": "c2", "amount": 20, "order": "k2"})),
            ("c9", event("o3", "jn.order", 2, {"customer": "c9", "amount": 30, "order": "k3"})),
            ("k1", event("p1", "jn.payment", 60, {"order": "k1"})),
            ("k2", event("p2", "jn.payment", 901, {"order": "k2"})),  # after o2's ten minutes
        ])
        outputs.wait_for(lambda seen: len(seen[out["enrich"]]) >= 3 and len(seen[out["inner"]]) >= 1, 300, job)

        # The table changes while the rule runs: later events see the new rows.
        changed_at = time.monotonic()
        put_rows([{"key": "c9", "data": {"tier": "bronze"}}, {"key": "c1", "data": {"tier": "platinum"}}])
        produce([
            ("c9", event("o4", "jn.order", 1000, {"customer": "c9", "amount": 40, "order": "k4"})),
            ("c1", event("o5", "jn.order", 1001, {"customer": "c1", "amount": 50, "order": "k5"})),
        ])
        outputs.wait_for(lambda seen: len(seen[out["enrich"]]) >= 5, 300, job)
        change_seen_s = time.monotonic() - changed_at
        # The watermark passes every order's interval: the outer join emits the unpaid ones.
        produce([("clock", event("clock", "jn.clock", 7200, {}))])
        outputs.wait_for(lambda seen: len(seen[out["outer"]]) >= 5, 300, job)
        outputs.wait_for(lambda _: api.get(f"/rules/{rules['broken']['id']}").json()["status"] == "quarantined",
                         60, job)
        outputs.drain(3)
        rules["broken"] = api.get(f"/rules/{rules['broken']['id']}").json()
        yield {"outputs": {name: outputs.seen[topic] for name, topic in out.items()}, "rules": rules,
               "change_seen_s": change_seen_s, "running": len(job.joins.queries)}
    finally:
        job.stop()
        outputs.consumer.close()
        # Other tests' rules jobs run every running rule: these would start join queries there.
        for rule in rules.values():
            api.delete(f"/rules/{rule['id']}")
        api.close()


def test_a_stream_table_join_enriches_each_event_with_the_table_as_it_is(joined: dict[str, Any]) -> None:
    enriched = {item["data"]["id"]: item for item in joined["outputs"]["enrich"]}
    # Spark leaves NULL fields out of the JSON: an event with no row has no tier.
    assert {key: item["data"].get("tier") for key, item in enriched.items()} == {
        "o1": "gold", "o2": "silver", "o3": None, "o4": "bronze", "o5": "platinum"}
    assert (enriched["o1"]["subject"], enriched["o1"]["type"], enriched["o1"]["data"]["amount"]) == ("c1", "join.enrich", 10)
    assert enriched["o1"]["source"] == f"wayline.rules/{joined['rules']['enrich']['name']}"


def test_a_reference_table_change_reaches_the_running_rule_within_seconds(joined: dict[str, Any]) -> None:
    assert joined["change_seen_s"] < 60


def test_an_interval_join_pairs_events_within_the_bound(joined: dict[str, Any]) -> None:
    pairs = [(m["data"]["order_id"], m["data"]["payment_id"], m["subject"]) for m in joined["outputs"]["inner"]]
    assert pairs == [("o1", "p1", "k1")]


def test_a_left_interval_join_emits_unmatched_orders_once_their_interval_has_passed(joined: dict[str, Any]) -> None:
    pairs = sorted((m["data"]["order_id"], m["data"].get("payment_id")) for m in joined["outputs"]["outer"])
    assert pairs == [("o1", "p1"), ("o2", None), ("o3", None), ("o4", None), ("o5", None)]
    assert len({m["id"] for m in joined["outputs"]["outer"]}) == 5


def test_a_join_whose_query_fails_is_quarantined_and_the_others_run_on(joined: dict[str, Any]) -> None:
    broken = joined["rules"]["broken"]
    assert broken["status"] == "quarantined" and "DIVIDE_BY_ZERO" in broken["error"]
    assert joined["outputs"]["broken"] == []
    assert joined["running"] == 3


# -- the streaming plan against the batch plan -------------------------------------------------

BETWEEN = "b.event_time BETWEEN a.event_time AND a.event_time + INTERVAL '5' SECOND"
# Each case: the rule, its events (id, type, seconds, data), and the pairs (a id, b id or
# None) both plans must give. Clock events at the end move the watermark past every interval.
CASES = {
    # Strict bounds exclude their ends: p1 is at o1's time, p2 at o1's time + 5 s.
    "strict bounds": (
        "SELECT a.id AS aid, b.id AS bid FROM events a JOIN events b ON a.data.k = b.data.k AND b.type = 'p' "
        "AND b.event_time > a.event_time AND b.event_time < a.event_time + INTERVAL '5' SECOND WHERE a.type = 'o'",
        [("o1", "o", 0, {"k": "k1"}), ("p1", "p", 0, {"k": "k1"}), ("p2", "p", 5, {"k": "k1"})],
        set(),
    ),
    # Neither event has the key: NULL never equals NULL.
    "null keys": (
        f"SELECT a.id AS aid, b.id AS bid FROM events a JOIN events b ON a.data.k = b.data.k AND b.type = 'p' "
        f"AND {BETWEEN} WHERE a.type = 'o'",
        [("o1", "o", 0, {}), ("p1", "p", 1, {})],
        set(),
    ),
    # A LEFT JOIN's ON condition on a alone decides matches, not which a events are kept.
    "left join, a condition in ON": (
        f"SELECT a.id AS aid, b.id AS bid FROM events a LEFT JOIN events b ON a.data.k = b.data.k "
        f"AND b.type = 'p' AND a.data.v > 5 AND {BETWEEN} WHERE a.type = 'o'",
        [("o1", "o", 0, {"k": "k1", "v": 8}), ("o2", "o", 1, {"k": "k2", "v": 3})],
        {("o1", None), ("o2", None)},
    ),
    # ... and a LEFT JOIN's a with a NULL key is kept unmatched, while b's NULL keys meet nothing.
    "left join, null keys": (
        f"SELECT a.id AS aid, b.id AS bid FROM events a LEFT JOIN events b ON a.data.k = b.data.k "
        f"AND b.type = 'p' AND {BETWEEN} WHERE a.type = 'o'",
        [("o1", "o", 0, {}), ("o2", "o", 0, {"k": "k2"}), ("p1", "p", 1, {}), ("p2", "p", 2, {"k": "k2"})],
        {("o1", None), ("o2", "p2")},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_interval_join_streams_the_pairs_its_batch_plan_gives(
        case: str, settings: Settings, spark, database, tmp_path_factory: pytest.TempPathFactory) -> None:
    from pyspark.sql import functions as F

    from wayline.pipelines.envelope import parse_events, valid_events
    from wayline.pipelines.joins import ReferenceTables, _joined, _records, start_join
    from wayline.rules.engine import ActiveRule
    from wayline.rules.rule import compile_rule

    sql, events, expected = CASES[case]
    suffix = str(time.time_ns())[-8:]
    prefix, out = f"events.ij{suffix}.", f"rules.out.ij.{suffix}"
    bootstrap = settings.kafka_bootstrap()
    # One partition: the events reach the query in the order produced.
    ensure_topics(bootstrap, [prefix + "in", out], 1)
    job_settings = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix}),
        "rules": settings.rules.model_copy(update={"allowed_lateness_s": 60.0, "join_starting_offsets": "earliest"}),
    })
    rule = ActiveRule(f"rule_ij{suffix}", 1, f"ij-{suffix}", compile_rule(sql), out, "ij", 1000, 2000)
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(items: list[tuple[str, str, float, dict[str, Any]]]) -> None:
        for event_id, event_type, seconds, data in items:
            producer.produce(prefix + "in", key=event_id.encode(), value=event(event_id, event_type, seconds, data))
        assert producer.flush(30) == 0

    produce(events)
    query = start_join(spark, job_settings, rule, tmp_path_factory.mktemp("ij") / "checkpoint",
                       ReferenceTables(spark, job_settings, database))
    try:
        query.processAllAvailable()
        # The first clock event moves the watermark; the second's micro-batch runs with it.
        for seconds in (3600, 7200):
            produce([(f"clock{seconds}", "clock", seconds, {})])
            query.processAllAvailable()
    finally:
        query.stop()

    def pairs(records: Any) -> set[tuple[str, str | None]]:
        rows = records.select(F.get_json_object(F.col("value").cast("string"), "$.data.aid").alias("aid"),
                              F.get_json_object(F.col("value").cast("string"), "$.data.bid").alias("bid")).collect()
        return {(row.aid, row.bid) for row in rows}

    streamed = pairs(spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", out).load())
    batch = valid_events(parse_events(spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                                      .option("subscribe", prefix + "in").option("includeHeaders", "true").load(),
                                      settings.envelope))
    spec = rule.compiled.join
    assert spec is not None
    assert (streamed, pairs(_records(_joined(batch, batch, spec), rule, spec))) == (expected, expected)


def test_a_join_rule_spark_will_not_start_is_reported_and_the_others_start(
        settings: Settings, spark, database, tmp_path_factory: pytest.TempPathFactory) -> None:
    from wayline.pipelines.joins import JoinQueries
    from wayline.rules.engine import ActiveRule
    from wayline.rules.rule import compile_rule

    def rule(name: str, sql: str) -> ActiveRule:
        return ActiveRule(f"rule_{name}", 1, name, compile_rule(sql), "rules.out.unused", "t", 1000, 2000)

    good = rule("good", PAID.format(how="JOIN"))
    tiny = rule("tiny", PAID.format(how="JOIN").replace("'10' MINUTE", "'0.00005' SECOND"))
    spec = tiny.compiled.join
    assert spec is not None and "'0.000050'" in spec.condition
    # As the bound rendered before it was written out in plain digits: Spark cannot parse it.
    broken = dataclasses.replace(tiny, compiled=dataclasses.replace(tiny.compiled, join=dataclasses.replace(
        spec, condition=spec.condition.replace("'0.000050'", "'5e-05'"))))
    queries = JoinQueries(spark, settings, database, tmp_path_factory.mktemp("refused"))
    try:
        queries.sync([broken, good])
        assert list(queries.queries) == [good.state_key]
        failures = queries.failures()
        assert list(failures) == [broken.state_key] and "5e-05" in failures[broken.state_key]
        assert queries.failures() == {}
    finally:
        queries.stop()
