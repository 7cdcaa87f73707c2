"""The rules job end to end: rules deployed through the admin API (real HTTP, real
PostgreSQL) into a running query, events produced to the real broker, matches read back
from the rules' output topics.

One scenario runs once for the module (a Spark query is the expensive part), in acts:

1. before the query starts: a filter, a window aggregation, a pattern (three failed logins
   then a success within five minutes), a sliding window (three failed logins within any
   minute), a pattern that divides by zero, and a filter that
   fails in the JVM (ANSI division by zero); events for all of them, and a late "clock"
   event that moves the watermark past everything;
2. while it runs: a new pattern rule (V-shaped price) is deployed through the API and its
   events produced; the filter is changed; the window rule is removed;
3. a pattern that loops (too many ways to match) and one over its state budget are
   deployed next to a well-behaved twin.

The tests below each check one promise against what was recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Consumer, Producer

from tests import waiting
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

LOGINS = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user
  ORDER BY event_time
  MEASURES FIRST(F.event_time) AS first_failure, COUNT(F.*) AS failures, S.id AS success_id
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (F{3,} S)
  WITHIN INTERVAL '5' MINUTE
  DEFINE F AS F.type = 'rul.login.failed', S AS S.type = 'rul.login.ok'
)
"""
V_SHAPE = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user
  ORDER BY event_time
  MEASURES FIRST(A.data.price) AS top, MIN(B.data.price) AS bottom, LAST(C.data.price) AS recovered
  PATTERN (A B+ C+)
  WITHIN INTERVAL '1' MINUTE
  DEFINE B AS B.data.price < PREV(B.data.price), C AS C.data.price > PREV(C.data.price)
    AND C.type = 'rul.price'
)
"""
DIVIDE = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES A.id AS a PATTERN (A)
  WITHIN INTERVAL '1' MINUTE DEFINE A AS A.data.price / 0 > 1
)
"""
LOOPING = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES COUNT(*) AS n
  PATTERN ((A | B)+ C) WITHIN INTERVAL '1' HOUR
  DEFINE A AS SUM(A.data.price) >= 0, B AS SUM(B.data.price) >= 0, C AS C.type = 'never'
)
"""
HOARDER = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES COUNT(*) AS n
  PATTERN (A+ C) WITHIN INTERVAL '1' HOUR
  DEFINE A AS A.type = 'rul.load', C AS C.type = 'never'
)
"""
SLIDING = """
SELECT data.user, id AS third, COUNT(*) AS failures FROM events WHERE type = 'rul.login.failed'
GROUP BY data.user, sliding_window(event_time, '1 minute') HAVING COUNT(*) >= 3
"""
TWIN = """
SELECT * FROM events MATCH_RECOGNIZE (
  PARTITION BY data.user ORDER BY event_time MEASURES COUNT(*) AS n, LAST(A.id) AS last_id
  PATTERN (A{3}) WITHIN INTERVAL '1' HOUR
  DEFINE A AS A.type = 'rul.load'
)
"""


def event(event_id: str, event_type: str, seconds: float, data: dict[str, Any], tenant: str = "t-r") -> bytes:
    return orjson.dumps({
        "specversion": "1.0", "id": event_id, "source": "tests", "type": event_type, "tenantid": tenant,
        "time": (T0 + timedelta(seconds=seconds)).isoformat(), "data": data,
    })


@dataclass
class Scenario:
    topic_in: str
    outputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    marks: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    reloads: int = 0
    counters: Any = None


class Outputs:
    """Reads every output topic of the scenario into lists, keyed by topic."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"rules-test-{time.time_ns()}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })
        self.consumer.subscribe(topics)
        self.seen: dict[str, list[dict[str, Any]]] = {topic: [] for topic in topics}

    def drain(self, seconds: float = 0.5) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = self.consumer.poll(0.1)
            if message is None or message.error():
                continue
            self.seen[message.topic()].append(orjson.loads(message.value()))

    def wait_for(self, check: Callable[[dict[str, list[dict[str, Any]]]], bool], timeout: float, job) -> None:
        def met() -> bool:
            self.drain()  # reads for half a second: the poll interval
            job.raise_if_failed()
            return check(self.seen)

        waiting.wait_for(met, lambda: f"the outputs; seen: { {k: len(v) for k, v in self.seen.items()} }", timeout,
                         every_s=0)


@pytest.fixture(scope="module")
def scenario(settings: Settings, spark, database, admin_api: str, admin_key: str, tmp_path_factory) -> Iterator[Scenario]:
    from wayline.pipelines.rules_job import RulesJob

    suffix = str(time.time_ns())[-8:]
    prefix = f"events.rul{suffix}."
    topic_in = prefix + "in"
    out = {name: f"rules.out.{name}.{suffix}" for name in
           ("filter", "badfilter", "window", "logins", "sliding", "divide", "vshape", "looping", "hoarder",
            "twin")}
    job_settings = settings.model_copy(update={
        "kafka": settings.kafka.model_copy(update={"event_topic_prefix": prefix}),
        "rules": settings.rules.model_copy(update={"allowed_lateness_s": 0.0, "shards": 8}),
    })
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [topic_in], 2)
    ensure_topics(bootstrap, list(out.values()), 1)
    api = httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})

    def deploy(name: str, sql: str, **extra: Any) -> dict[str, Any]:
        response = api.post("/rules", json={
            "name": f"{name}-{suffix}", "sql": sql, "output_topic": out[name], "output_type": f"alert.{name}", **extra,
        })
        assert response.status_code == 201, response.text
        return response.json()

    def produce(records: list[tuple[str, bytes]]) -> None:
        for key, value in records:
            producer.produce(topic_in, key=key.encode(), value=value)
        producer.flush(30)

    result = Scenario(topic_in)
    # Act 1: rules and events before the query starts.
    result.rules["filter"] = deploy(
        "filter", "SELECT id, data.amount AS amount, tenantid FROM events "
                  "WHERE type = 'rul.order' AND data.amount >= 100", partition_key=["tenantid"])
    result.rules["window"] = deploy(
        "window", "SELECT tenantid, window.start AS start, COUNT(*) AS orders, SUM(data.amount) AS total "
                  "FROM events WHERE type = 'rul.order' GROUP BY tenantid, window(event_time, '1 minute') "
                  "HAVING COUNT(*) >= 2")
    result.rules["logins"] = deploy("logins", LOGINS)
    result.rules["sliding"] = deploy("sliding", SLIDING)
    result.rules["divide"] = deploy("divide", DIVIDE)
    # Spark runs every filter in one projection; this one makes that projection fail, so the
    # job falls back to one filter at a time and quarantines only this one.
    result.rules["badfilter"] = deploy(
        "badfilter", "SELECT id FROM events WHERE type = 'rul.order' AND 1 / (data.amount - data.amount) > 0")
    records = [
        ("o1", event("o1", "rul.order", 1, {"amount": 50})),
        ("o2", event("o2", "rul.order", 2, {"amount": 150})),
        ("o3", event("o3", "rul.order", 3, {"amount": 300}, tenant="t-s")),
        ("o4", event("o4", "rul.order", 70, {"amount": 100})),
    ]
    # user u1: 3 failures then a success within 5 minutes (a match); u2: only 2 failures;
    # u3: 3 failures, success 6 minutes after the first (outside WITHIN).
    for user, failures, success_at in (("u1", 3, 40), ("u2", 2, 40), ("u3", 3, 360)):
        for n in range(failures):
            records.append((user, event(f"{user}-f{n}", "rul.login.failed", 10 + n, {"user": user})))
        records.append((user, event(f"{user}-ok", "rul.login.ok", success_at, {"user": user})))
    records.append(("u4", event("u4-price", "rul.price", 5, {"user": "u4", "price": 3})))
    records.append(("clock", event("clock-1", "rul.clock", 3600, {"user": "clock"})))
    produce(records)

    job = RulesJob(spark, job_settings, database, tmp_path_factory.mktemp("rules-ckpt")).start()
    outputs = Outputs(bootstrap, list(out.values()))
    try:
        outputs.wait_for(lambda seen: len(seen[out["logins"]]) >= 1 and len(seen[out["window"]]) >= 1
                         and len(seen[out["filter"]]) >= 2 and len(seen[out["sliding"]]) >= 2, 240, job)
        outputs.wait_for(lambda _: _status(api, result.rules["divide"]) == "quarantined"
                         and _status(api, result.rules["badfilter"]) == "quarantined", 60, job)
        outputs.drain(3)
        result.marks["act1"] = {topic: len(items) for topic, items in outputs.seen.items()}

        # Act 2: deploy a new pattern into the running query, change the filter, remove the window.
        result.rules["vshape"] = deploy("vshape", V_SHAPE)
        changed = api.patch(f"/rules/{result.rules['filter']['id']}", json={
            "sql": "SELECT id, data.amount AS amount FROM events WHERE type = 'rul.order' AND data.amount < 100",
        })
        assert changed.status_code == 200, changed.text
        result.rules["filter_changed"] = changed.json()
        assert api.delete(f"/rules/{result.rules['window']['id']}").status_code == 204
        outputs.wait_for(lambda _: job.rereads_registry(), 60, job)
        prices = [10, 8, 6, 7, 9]
        produce([("u5", event(f"p{i}", "rul.price", 3700 + i, {"user": "u5", "price": p})) for i, p in enumerate(prices)]
                + [("o5", event("o5", "rul.order", 3700, {"amount": 10})),
                   ("o6", event("o6", "rul.order", 3701, {"amount": 500})),
                   ("o7", event("o7", "rul.order", 3702, {"amount": 20})),
                   ("clock", event("clock-2", "rul.clock", 7200, {"user": "clock"}))])
        outputs.wait_for(lambda seen: len(seen[out["vshape"]]) >= 1
                         and len(seen[out["filter"]]) >= result.marks["act1"][out["filter"]] + 2, 180, job)
        outputs.drain(3)
        result.marks["act2"] = {topic: len(items) for topic, items in outputs.seen.items()}

        # Act 3: a looping rule and a hoarding one, next to a well-behaved twin.
        result.rules["looping"] = deploy("looping", LOOPING, time_budget_ms=2000)
        result.rules["hoarder"] = deploy("hoarder", HOARDER, state_budget=20)
        result.rules["twin"] = deploy("twin", TWIN)
        outputs.wait_for(lambda _: job.rereads_registry(), 60, job)
        # u7's prices are powers of two: every split of its rows between A and B has its own
        # sums, so the looping rule's ways of matching double with each row.
        produce([("u6", event(f"l{i}", "rul.load", 7300 + i, {"user": "u6", "price": 1})) for i in range(30)]
                + [("u7", event(f"s{i}", "rul.spin", 7300 + i, {"user": "u7", "price": 2 ** i})) for i in range(40)]
                + [("clock", event("clock-3", "rul.clock", 10_800, {"user": "clock"}))])
        outputs.wait_for(lambda seen: len(seen[out["twin"]]) >= 10, 180, job)
        outputs.wait_for(lambda _: _status(api, result.rules["looping"]) == "quarantined"
                         and _status(api, result.rules["hoarder"]) == "quarantined", 60, job)
        outputs.drain(2)
        result.outputs = {name: outputs.seen[topic] for name, topic in out.items()}
        result.restarts = job.counters.restarts
        result.reloads = job.counters.reloads
        result.counters = job.counters
        for name, rule in list(result.rules.items()):
            fetched = api.get(f"/rules/{rule['id']}")
            if fetched.status_code == 200:
                result.rules[name] = fetched.json()
        result.marks.update({name: len(items) for name, items in result.outputs.items()})
        yield result
    finally:
        job.stop()
        outputs.consumer.close()
        api.close()


def _status(api: httpx.Client, rule: dict[str, Any]) -> str:
    return api.get(f"/rules/{rule['id']}").json()["status"]


def by_id(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["data"].get("id") or item["id"]: item for item in items}


def test_a_filter_emits_cloudevents_for_the_events_it_selects(scenario: Scenario) -> None:
    first = scenario.outputs["filter"][: 3]
    assert sorted(item["data"]["id"] for item in first) == ["o2", "o3", "o4"]
    item = next(i for i in first if i["data"]["id"] == "o3")
    assert item["type"] == "alert.filter"
    assert item["source"].startswith("wayline.rules/filter-")
    assert item["subject"] == "t-s" and item["tenantid"] == "t-s"
    assert item["data"] == {"id": "o3", "amount": 300, "tenantid": "t-s"}


def test_a_window_rule_emits_each_closed_window_that_passes_having(scenario: Scenario) -> None:
    windows = scenario.outputs["window"]
    assert [(w["subject"], w["data"]["orders"], w["data"]["total"]) for w in windows] == [("t-r", 2, 200)]
    assert windows[0]["data"]["start"].startswith("2026-03-01T09:00:00")


def test_a_pattern_deployed_before_start_finds_three_failures_then_a_success(scenario: Scenario) -> None:
    matches = scenario.outputs["logins"]
    assert [(m["subject"], m["data"]["failures"], m["data"]["success_id"]) for m in matches] == [("u1", 3, "u1-ok")]
    assert matches[0]["type"] == "alert.logins"


def test_a_sliding_window_fires_on_the_event_that_completes_it(scenario: Scenario) -> None:
    # u1 and u3 fail three times within a minute (u3's success comes too late for the
    # pattern, not for this rule); u2 only twice.
    alerts = sorted(scenario.outputs["sliding"], key=lambda item: item["subject"])
    assert [(a["subject"], a["data"]["third"], a["data"]["failures"], a["time"]) for a in alerts] == [
        ("u1", "u1-f2", 3, "2026-03-01T09:00:12Z"), ("u3", "u3-f2", 3, "2026-03-01T09:00:12Z")]
    assert alerts[0]["type"] == "alert.sliding" and alerts[0]["data"]["user"] == "u1"


def test_a_rule_that_divides_by_zero_is_quarantined_with_its_error(scenario: Scenario) -> None:
    rule = scenario.rules["divide"]
    assert rule["status"] == "quarantined" and rule["quarantines"] == 1
    assert "division by zero" in rule["error"]
    assert scenario.outputs["divide"] == []


def test_a_filter_that_fails_in_the_jvm_is_quarantined_and_the_other_filters_still_emit(scenario: Scenario) -> None:
    rule = scenario.rules["badfilter"]
    assert rule["status"] == "quarantined" and rule["quarantines"] == 1
    assert "DIVIDE_BY_ZERO" in rule["error"]
    assert scenario.outputs["badfilter"] == []
    # The good filter's output of that micro-batch was written by the one-by-one fallback.
    assert sorted(item["data"]["id"] for item in scenario.outputs["filter"][:3]) == ["o2", "o3", "o4"]


def test_a_pattern_deployed_into_the_running_query_finds_its_matches(scenario: Scenario) -> None:
    assert scenario.restarts == 0  # the same partition key as a running rule: no restart
    matches = scenario.outputs["vshape"]
    assert [(m["subject"], m["data"]["top"], m["data"]["bottom"], m["data"]["recovered"]) for m in matches] \
        == [("u5", 10, 6, 9)]


def test_a_changed_filter_applies_from_the_next_micro_batch(scenario: Scenario) -> None:
    before = scenario.marks["act1"]
    later = scenario.outputs["filter"][sum(v for k, v in before.items() if "filter" in k):]
    assert sorted(item["data"]["id"] for item in later) == ["o5", "o7"]
    assert scenario.rules["filter_changed"]["revision"] == 2


def test_a_removed_rule_emits_nothing_more(scenario: Scenario) -> None:
    assert len(scenario.outputs["window"]) == 1  # o5..o7's window would have passed HAVING


def test_looping_and_hoarding_rules_are_quarantined_and_their_twin_is_unaffected(scenario: Scenario) -> None:
    looping, hoarder = scenario.rules["looping"], scenario.rules["hoarder"]
    assert looping["status"] == "quarantined"
    assert "time budget" in looping["error"] or "ways of matching" in looping["error"]
    assert hoarder["status"] == "quarantined" and "state budget" in hoarder["error"]
    assert scenario.outputs["looping"] == [] and scenario.outputs["hoarder"] == []
    twin = scenario.outputs["twin"]
    assert [m["data"]["last_id"] for m in twin] == [f"l{i}" for i in range(2, 30, 3)]


def test_per_rule_metrics_are_counted(scenario: Scenario) -> None:
    counters = scenario.counters
    logins = counters.rules[scenario.rules["logins"]["id"]]
    assert logins.matches == 1 and logins.input >= 12
    assert counters.rules[scenario.rules["divide"]["id"]].quarantined == 1
    # The JVM's rules are counted in the micro-batch's first job, before the write: exactly
    # what reached Kafka, through the filters' one-by-one fallback too (act 1).
    for name in ("filter", "window", "badfilter"):
        assert counters.rules[scenario.rules[name]["id"]].matches == len(scenario.outputs[name]), name


def test_filters_spread_over_several_projections_each_emit_just_their_events(spark: Any) -> None:
    from pyspark.sql import functions as F

    from wayline.pipelines.rules_filters import FILTERS_PER_PROJECTION, filters_output
    from wayline.rules.engine import ActiveRule
    from wayline.rules.rule import compile_rule

    events = [(f"e{n}", f"k{n % 4}", orjson.dumps({"n": n % 9}).decode()) for n in range(60)]
    frame = spark.createDataFrame(events, "id string, type string, data_json string").select(
        "id", "type", F.lit(None).cast("string").alias("subject"), F.lit("t").alias("tenantid"),
        F.parse_json("data_json").alias("data"), F.lit(T0).alias("event_time"))
    sqls = [f"SELECT id FROM events WHERE type = 'k{i % 4}' AND data.n > {i % 9}"
            for i in range(2 * FILTERS_PER_PROJECTION + 3)]
    sqls[FILTERS_PER_PROJECTION + 1] = "SELECT id FROM events"  # no WHERE: every event
    rules = [ActiveRule(f"r{i}", 1, f"f{i}", compile_rule(sql), "out", "alert", 1, 1000) for i, sql in enumerate(sqls)]

    emitted: dict[str, set[str]] = {}
    for row in filters_output(frame, rules).collect():
        emitted.setdefault(row.rule, set()).add(orjson.loads(row.value)["data"]["id"])

    def expected(i: int) -> set[str]:
        if i == FILTERS_PER_PROJECTION + 1:
            return {event_id for event_id, _, _ in events}
        return {event_id for event_id, kind, data in events
                if kind == f"k{i % 4}" and orjson.loads(data)["n"] > i % 9}
    assert {rule.state_key: emitted.get(rule.state_key, set()) for rule in rules} == {
        rule.state_key: expected(i) for i, rule in enumerate(rules)}
