"""The delivery job on a Spark standalone cluster, and the loss of one of its workers.

`wayline cluster up`'s master and two workers (1 core each) run as their own JVMs;
`wayline run --master spark://… delivery` runs as its own process, its executors on the
workers, with the broker, database and encryption key given by settings rather than by a
local stack file, and its checkpoints in a state dir of its own. A first set of events
must arrive exactly as in local mode (each event once per endpoint, each streaming
message once); then one worker is killed by its pid mid-stream, and the job must carry on
on the other with every event delivered or waiting in the retry store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from sqlalchemy import select

from tests.delivery.receivers import Receivers
from tests.pipelines.conftest import start_on_cluster
from tests.pipelines.test_delivery_crash import Arrivals, kill_hard, subscribe_single_and_batched
from tests.waiting import wait_for
from wayline.core.kafka import ensure_topics
from wayline.core.settings import Settings
from wayline.delivery.storage.store import RetryEntry
from wayline.registry.endpoint import EndpointService

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PREFIX = "events.cluster."
TOPICS = (f"{PREFIX}a", f"{PREFIX}b")
EVENT_TYPE = "cluster.happened"
FIRST = 200  # delivered with both workers up
SECOND = 1200  # streamed while a worker dies
RATE = 100
BATCH = 20


def start_job(job_settings: Settings, master: str, stack_settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    return start_on_cluster("delivery", job_settings, master, stack_settings, log, {
        "WAYLINE_KAFKA__EVENT_TOPIC_PREFIX": PREFIX,
        "WAYLINE_DELIVERY__METRICS_PORT": "0",
        "WAYLINE_DELIVERY__BATCH_TOPIC": "wayline.cluster.batching",
        "WAYLINE_DELIVERY__STAGE_DEADLINE_S": "5",
        # The micro-batch engine, whose tasks spread over the workers: the senders engine's
        # real-time query would need a core per source partition, more than these workers have.
        "WAYLINE_DELIVERY__ENGINE": "micro_batch",
    })


def produce(bootstrap: str, event_ids: list[str], rate: float | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, event_id in enumerate(event_ids):
        producer.produce(TOPICS[n % 2], orjson.dumps({
            "specversion": "1.0", "id": event_id, "source": "/cluster", "type": EVENT_TYPE,
            "tenantid": "cluster-t", "data": {"n": n}}))
        producer.poll(0)
        if rate:
            time.sleep(1 / rate)  # the scenario: a stream spread over time
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def run_on_cluster(local_cluster, api_settings: Settings, database) -> Iterator[dict]:
    job_settings, state = local_cluster
    job_settings = job_settings.model_copy(update={"registry": api_settings.registry})
    bootstrap = api_settings.kafka_bootstrap()
    ensure_topics(bootstrap, TOPICS, 2)
    endpoints = EndpointService.from_settings(api_settings)
    arrivals = Arrivals()
    result: dict = {"arrivals": arrivals}
    with Receivers() as receivers:
        base = receivers.serve({"/single": arrivals.handle, "/batched": arrivals.handle})
        ids = subscribe_single_and_batched(database, endpoints, base, EVENT_TYPE, "cluster-t", BATCH)
        first = [f"cluster-{n}" for n in range(FIRST)]
        second = [f"cluster-{n}" for n in range(FIRST, FIRST + SECOND)]
        log = job_settings.state_dir / "job.log"
        job = start_job(job_settings, state.master_url, api_settings, log)

        def until(condition: Callable[[], object], what: str, timeout_s: float) -> None:
            def met() -> bool:
                assert job.poll() is None, f"the job exited while waiting for {what}; its log: {log}"
                return bool(condition())
            wait_for(met, what, timeout_s)

        try:
            produce(bootstrap, first)
            until(lambda: arrivals.count("/single") == FIRST and arrivals.count("/batched") == FIRST,
                  "the first events", 240)
            wait_for(arrivals.quiet, "the receiver to be quiet", 30)
            result["first"] = {path: set(arrivals.events[path]) for path in ("/single", "/batched")}
            result["first_requests"] = Counter({k: len(v) for k, v in arrivals.at.items()})
            result["before_kill"] = state.overview()

            producer = threading.Thread(target=produce, args=(bootstrap, second, RATE), name="cluster-producer")
            producer.start()
            until(lambda: arrivals.count("/single") > FIRST + 200, "deliveries of the stream", 120)
            os.kill(state.worker_pids[0], signal.SIGKILL)
            result["killed_during"] = arrivals.count("/single") - FIRST
            producer.join(timeout=120)
            everything = set(first + second)

            def settled() -> bool:
                with database.transaction() as s:
                    waiting = {e for row in s.scalars(select(RetryEntry.event_ids)) for e in row}
                return all((arrivals.events[p] | waiting) >= everything for p in ("/single", "/batched"))

            until(settled, "every event delivered or waiting for a retry", 240)
            result["after_kill"] = state.overview()
        finally:
            kill_hard(job)
        with database.transaction() as s:
            result["waiting"] = {e for row in s.scalars(select(RetryEntry).where(
                RetryEntry.subscription_id.in_(ids.values()))) for e in row.event_ids}
        result.update(ids=ids, first_ids=set(first), all_ids=set(first + second))
        yield result


def test_the_job_ran_on_both_workers(run_on_cluster: dict) -> None:
    before = run_on_cluster["before_kill"]
    assert before["aliveworkers"] == 2
    assert [app["name"] for app in before["activeapps"]] == ["wayline"]
    assert [worker["coresused"] for worker in before["workers"]] == [1, 1]


def test_events_arrive_exactly_as_in_local_mode(run_on_cluster: dict) -> None:
    assert run_on_cluster["first"] == {"/single": run_on_cluster["first_ids"], "/batched": run_on_cluster["first_ids"]}
    # Nothing failed before the kill: no message went out twice.
    assert set(run_on_cluster["first_requests"].values()) == {1}


def test_a_killed_worker_loses_nothing(run_on_cluster: dict) -> None:
    assert 0 < run_on_cluster["killed_during"] < SECOND
    assert run_on_cluster["after_kill"]["aliveworkers"] == 1
    arrivals = run_on_cluster["arrivals"]
    for path in ("/single", "/batched"):
        assert arrivals.events[path] | run_on_cluster["waiting"] >= run_on_cluster["all_ids"], path
