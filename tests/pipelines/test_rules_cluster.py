"""The rules job on a Spark standalone cluster gives what it gives in local mode.

`wayline run --master spark://… rules` runs as its own process on two 1-core workers: a
filter, a window aggregation and a MATCH_RECOGNIZE pattern (their state in RocksDB state
stores on the executors, checkpointed to the job's state dir) over the same events as
tests/pipelines/test_rules.py's first act, with the same expected outputs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from tests.pipelines.conftest import start_on_cluster
from tests.pipelines.test_delivery_crash import kill_hard
from tests.pipelines.test_rules import LOGINS, Outputs, event
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Running:
    """Stands in for the in-process job in :meth:`Outputs.wait_for`: fails fast when the
    job's process has exited."""

    def __init__(self, job, log) -> None:
        self.job, self.log = job, log

    def raise_if_failed(self) -> None:
        assert self.job.poll() is None, f"the rules job exited; its log: {self.log}"


@pytest.fixture(scope="module")
def rules_on_cluster(local_cluster, settings: Settings, admin_api: str, admin_key: str) -> Iterator[dict[str, list]]:
    job_settings, state = local_cluster
    suffix = str(time.time_ns())[-8:]
    prefix = f"events.rulc{suffix}."
    out = {name: f"rules.out.cluster-{name}.{suffix}" for name in ("filter", "window", "logins")}
    bootstrap = settings.kafka_bootstrap()
    ensure_topics(bootstrap, [prefix + "in"], 2)
    ensure_topics(bootstrap, list(out.values()), 1)
    with httpx.Client(base_url=admin_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30) as api:
        for name, sql, extra in (
            ("filter", "SELECT id, data.amount AS amount, tenantid FROM events "
                       "WHERE type = 'rul.order' AND data.amount >= 100", {"partition_key": ["tenantid"]}),
            ("window", "SELECT tenantid, window.start AS start, COUNT(*) AS orders, SUM(data.amount) AS total "
                       "FROM events WHERE type = 'rul.order' GROUP BY tenantid, window(event_time, '1 minute') "
                       "HAVING COUNT(*) >= 2", {}),
            ("logins", LOGINS, {}),
        ):
            response = api.post("/rules", json={"name": f"cluster-{name}-{suffix}", "sql": sql,
                                                 "output_topic": out[name], "output_type": f"alert.{name}", **extra})
            assert response.status_code == 201, response.text
    records: list[tuple[str, bytes]] = [
        ("o1", event("o1", "rul.order", 1, {"amount": 50})),
        ("o2", event("o2", "rul.order", 2, {"amount": 150})),
        ("o3", event("o3", "rul.order", 3, {"amount": 300}, tenant="t-s")),
        ("o4", event("o4", "rul.order", 70, {"amount": 100})),
    ]
    for user, failures, success_at in (("u1", 3, 40), ("u2", 2, 40), ("u3", 3, 360)):
        records += [(user, event(f"{user}-f{n}", "rul.login.failed", 10 + n, {"user": user})) for n in range(failures)]
        records.append((user, event(f"{user}-ok", "rul.login.ok", success_at, {"user": user})))
    records.append(("clock", event("clock-1", "rul.clock", 3600, {"user": "clock"})))
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(prefix + "in", key=key.encode(), value=value)
    assert producer.flush(30) == 0

    log = job_settings.state_dir / "rules-job.log"
    job = start_on_cluster("rules", job_settings, state.master_url, settings, log, {
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": prefix,
        "WAYLINE_RULES__ALLOWED_LATENESS_S": "0",
        "WAYLINE_RULES__SHARDS": "8",
        "WAYLINE_RULES__METRICS_PORT": "0",
    })
    outputs = Outputs(bootstrap, list(out.values()))
    try:
        outputs.wait_for(lambda seen: len(seen[out["logins"]]) >= 1 and len(seen[out["window"]]) >= 1
                         and len(seen[out["filter"]]) >= 3, 300, Running(job, log))
        applications = state.overview()["activeapps"]
        outputs.drain(3)
        yield {name: outputs.seen[topic] for name, topic in out.items()} | {"applications": applications}
    finally:
        kill_hard(job)
        outputs.consumer.close()


def test_the_rules_job_ran_on_the_cluster(rules_on_cluster: dict[str, Any]) -> None:
    assert [app["name"] for app in rules_on_cluster["applications"]] == ["wayline"]
    assert rules_on_cluster["applications"][0]["cores"] == 2


def test_a_filter_emits_exactly_what_it_does_in_local_mode(rules_on_cluster: dict[str, Any]) -> None:
    assert sorted((item["data"]["id"], item["subject"]) for item in rules_on_cluster["filter"]) == [
        ("o2", "t-r"), ("o3", "t-s"), ("o4", "t-r")]


def test_a_window_emits_exactly_what_it_does_in_local_mode(rules_on_cluster: dict[str, Any]) -> None:
    windows = rules_on_cluster["window"]
    assert [(w["subject"], w["data"]["orders"], w["data"]["total"]) for w in windows] == [("t-r", 2, 200)]


def test_a_pattern_emits_exactly_what_it_does_in_local_mode(rules_on_cluster: dict[str, Any]) -> None:
    matches = rules_on_cluster["logins"]
    assert [(m["subject"], m["data"]["failures"], m["data"]["success_id"]) for m in matches] == [("u1", 3, "u1-ok")]
