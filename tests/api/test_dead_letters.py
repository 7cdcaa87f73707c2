"""The customer API for what happened to deliveries — attempts, dead letters, replay, test
events, re-enabling — over real HTTP, with dead letters made by the real retry path
(real receivers on 127.0.0.1, the real PostgreSQL; compressed schedule, no Spark)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from tests.delivery.receivers import Receivers
from tests.delivery.servers import Recorder, loopback_transport
from tests.waiting import wait_for
from wayline.core.secret import Secret
from wayline.delivery.attempt import Pending
from wayline.delivery.circuit import CircuitSettings
from wayline.delivery.retry import RetryPolicy
from wayline.delivery.signing import message_id
from wayline.delivery.stage import StageSettings, run_stage
from wayline.delivery.storage import dead_letter
from wayline.delivery.storage.drain import RetryQueue, run_retry_stage
from wayline.delivery.storage.store import PostgresDeliveryStore
from wayline.delivery.targets import Target
from wayline.delivery.transports.base import EndpointLimits

pytestmark = pytest.mark.integration

STAGE = StageSettings(
    deadline_s=2.0,
    policy=RetryPolicy(schedule=(timedelta(0), timedelta(seconds=0.1), timedelta(seconds=0.2)), jitter=0.0),
    circuit=CircuitSettings(consecutive_failures=100, min_calls=100, window=100),
)


@dataclass
class Switch:
    """A receiver that fails until told to recover."""

    recorder: Recorder
    healthy: bool = False

    async def handle(self, request: web.Request) -> web.Response:
        await self.recorder.record(request)
        return web.Response(status=204) if self.healthy else web.Response(status=500, text="down for now")


@dataclass
class Tenant:
    """One customer as the tests see it: its client, endpoint, secret and receiver."""

    client: object
    endpoint: dict
    secret: Secret
    switch: Switch
    messages: list[Pending]

    @property
    def target(self) -> Target:
        return Target(self.endpoint["id"], self.endpoint["url"], timeout_s=2, limits=EndpointLimits(),
                      secrets=(self.secret,))


def retry_path(database, targets: dict[str, Target], done: Callable[[], bool], timeout_s: float = 20) -> None:
    """The retry query's micro-batches, in a loop: drain due entries, then bury the dead."""
    queue = RetryQueue(database.engine)

    def finished() -> bool:
        if done():
            return True
        claims = queue.claim(0, 1, 1000, timedelta(seconds=30), datetime.now(UTC))
        run_retry_stage(claims, targets, queue, loopback_transport, STAGE)
        queue.bury(5000, datetime.now(UTC), lambda _: None)
        return False

    wait_for(finished, "the retry path to finish", timeout_s, every_s=0.05)


@pytest.fixture(scope="module")
def receivers() -> Iterator[Receivers]:
    with Receivers() as running:
        yield running


@pytest.fixture
def make_tenant(make_customer, receivers, database) -> Callable[[int], Tenant]:
    """A customer whose endpoint fails, with ``n`` messages already dead-lettered."""

    def make(n: int) -> Tenant:
        customer, client = make_customer()
        recorder = Recorder()
        switch = Switch(recorder)
        path = f"/{customer['id']}"
        base = receivers.serve({path: switch.handle})
        secret = Secret.generate()
        endpoint = client.post("/endpoints", json={"url": base + path, "secret": secret.text}).json()
        tenant = Tenant(client, endpoint, secret, switch, [])
        for i in range(n):
            body = orjson.dumps({"specversion": "1.0", "id": f"{customer['id']}-{i}", "source": "/t", "type": "t",
                                 "tenantid": "t", "data": {"n": i}})
            tenant.messages.append(Pending.single(f"{customer['id']}-{i}", body, subscription_id="sub_x",
                                                  endpoint_id=endpoint["id"], now=datetime.now(UTC)))
        targets = {endpoint["id"]: tenant.target}
        run_stage(tenant.messages, targets, PostgresDeliveryStore(database.engine), loopback_transport, STAGE)
        retry_path(database, targets, lambda: len(dead_letters(client, endpoint["id"])) == n)
        return tenant

    return make


def dead_letters(client, endpoint_id: str) -> list[dict]:
    return client.get("/dead-letters", params={"endpoint_id": endpoint_id, "limit": 500}).json()["data"]


def test_polling_returns_each_dead_letter_once_per_cursor_position(make_tenant) -> None:
    tenant = make_tenant(3)
    first = tenant.client.get("/dead-letters", params={"limit": 2}).json()
    second = tenant.client.get("/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    pages = [[d["webhook_id"] for d in page["data"]] for page in (first, second)]
    assert [len(page) for page in pages] == [2, 1]
    assert sorted(pages[0] + pages[1]) == sorted(m.webhook_id for m in tenant.messages), "each exactly once"
    ids = [d["id"] for d in first["data"] + second["data"]]
    assert ids == sorted(ids), "in id order"
    empty = tenant.client.get("/dead-letters", params={"cursor": second["next_cursor"]}).json()
    assert empty == {"data": [], "next_cursor": second["next_cursor"]}
    # The same position gives the same page again: nothing moved.
    again = tenant.client.get("/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert again["data"] == second["data"]

    letter = first["data"][0]
    assert letter["reason"] == "exhausted" and letter["attempts"] == 3
    sent = next(m for m in tenant.messages if m.webhook_id == letter["webhook_id"])
    assert letter["payload"] == orjson.loads(sent.payload) and letter["last_error"] == "HTTP 500: down for now"
    assert [(a["attempt"], a["outcome"], a["status"]) for a in letter["history"]] == [
        (3, "failed", 500), (2, "failed", 500), (1, "failed", 500)]
    at = [datetime.fromisoformat(a["attempted_at"]) for a in reversed(letter["history"])]
    assert at[1] - at[0] >= timedelta(seconds=0.1) and at[2] - at[1] >= timedelta(seconds=0.2)


def test_a_long_poll_returns_as_soon_as_a_dead_letter_arrives(make_tenant, database, monkeypatch) -> None:
    tenant = make_tenant(0)
    body = orjson.dumps({"specversion": "1.0", "id": "late", "source": "/t", "type": "t", "tenantid": "t"})
    message = Pending.single("late", body, subscription_id="sub_late", endpoint_id=tenant.endpoint["id"],
                             now=datetime.now(UTC))
    targets = {tenant.endpoint["id"]: tenant.target}
    # The API serves in this process: the poll's own look at the store shows when it is waiting.
    looked, poll = threading.Event(), dead_letter.poll_dead_letters

    def watched(*args, **kwargs) -> dead_letter.DeadLetterPage:
        found = poll(*args, **kwargs)
        if tenant.endpoint["id"] in args and not found.data:
            looked.set()
        return found

    monkeypatch.setattr(dead_letter, "poll_dead_letters", watched)

    def fail_it() -> None:
        looked.wait(20)  # the long poll has looked once and found nothing: the dead letter comes while it waits
        run_stage([message], targets, PostgresDeliveryStore(database.engine), loopback_transport, STAGE)
        retry_path(database, targets, lambda: bool(dead_letters(tenant.client, tenant.endpoint["id"])))

    worker = threading.Thread(target=fail_it)
    started = time.monotonic()
    worker.start()
    got = tenant.client.get("/dead-letters", params={"wait_s": 20, "endpoint_id": tenant.endpoint["id"]}).json()
    worker.join()
    assert [d["webhook_id"] for d in got["data"]] == [message.webhook_id]
    assert time.monotonic() - started < 15


def test_acknowledging_one_and_up_to_a_cursor_deletes_them(make_tenant) -> None:
    tenant = make_tenant(4)
    letters = dead_letters(tenant.client, tenant.endpoint["id"])
    assert tenant.client.delete(f"/dead-letters/{letters[0]['id']}").status_code == 204
    assert tenant.client.get(f"/dead-letters/{letters[0]['id']}").status_code == 404
    page = tenant.client.get("/dead-letters", params={"endpoint_id": tenant.endpoint["id"], "limit": 2}).json()
    acked = tenant.client.post("/dead-letters/ack", json={"cursor": page["next_cursor"]}).json()
    assert acked == {"acknowledged": 2}
    assert [d["id"] for d in dead_letters(tenant.client, tenant.endpoint["id"])] == [letters[3]["id"]]


def test_replay_delivers_with_the_same_webhook_id_once_the_receiver_recovers(make_tenant, database) -> None:
    tenant = make_tenant(3)
    letters = dead_letters(tenant.client, tenant.endpoint["id"])
    tenant.switch.healthy = True
    sent_before = len(tenant.switch.recorder.requests)
    one = tenant.client.post(f"/dead-letters/{letters[0]['id']}/replay")
    assert one.status_code == 202 and one.json()["webhook_ids"] == [letters[0]["webhook_id"]]
    now = datetime.now(UTC)
    rest = tenant.client.post("/dead-letters/replay", json={
        "endpoint_id": tenant.endpoint["id"], "since": (now - timedelta(hours=1)).isoformat(),
        "until": now.isoformat()}).json()
    assert sorted(rest["webhook_ids"]) == sorted(d["webhook_id"] for d in letters[1:])
    assert dead_letters(tenant.client, tenant.endpoint["id"]) == []

    def delivered() -> set[str]:
        attempts = tenant.client.get("/attempts", params={"endpoint_id": tenant.endpoint["id"],
                                                          "outcome": "succeeded"}).json()["data"]
        return {a["webhook_id"] for a in attempts}

    retry_path(database, {tenant.endpoint["id"]: tenant.target}, lambda: len(delivered()) == 3)
    assert delivered() == {m.webhook_id for m in tenant.messages}
    replayed = tenant.switch.recorder.requests[sent_before:]
    assert sorted(r.headers["webhook-id"] for r in replayed) == sorted(m.webhook_id for m in tenant.messages), \
        "each replayed once, under its original webhook id"
    for request in replayed:
        event = Webhook(tenant.secret.text).verify(request.body, request.headers)
        assert message_id(event["id"], "sub_x") == request.headers["webhook-id"]


def test_attempts_are_filtered_and_paged_newest_first(make_tenant) -> None:
    tenant = make_tenant(2)
    params = {"endpoint_id": tenant.endpoint["id"], "outcome": "failed", "limit": 4}
    first = tenant.client.get("/attempts", params=params).json()
    second = tenant.client.get("/attempts", params={**params, "cursor": first["next_cursor"]}).json()
    every = first["data"] + second["data"]
    assert len(every) == 6 and second["next_cursor"] is None
    times = [a["attempted_at"] for a in every]
    assert times == sorted(times, reverse=True)
    assert {a["outcome"] for a in every} == {"failed"}
    late = datetime.fromisoformat(every[1]["attempted_at"])
    newest = tenant.client.get("/attempts", params={**params, "since": late.isoformat()}).json()["data"]
    assert newest == every[:2]
    assert tenant.client.get("/attempts", params={**params, "outcome": "succeeded"}).json()["data"] == []


def test_a_customer_cannot_see_or_touch_another_customers_dead_letters_or_attempts(make_tenant, admin) -> None:
    a, b = make_tenant(1), make_tenant(0)
    (letter,) = dead_letters(a.client, a.endpoint["id"])
    assert b.client.get("/dead-letters").json()["data"] == []
    for response in (
        b.client.get(f"/dead-letters/{letter['id']}"),
        b.client.delete(f"/dead-letters/{letter['id']}"),
        b.client.post(f"/dead-letters/{letter['id']}/replay"),
        b.client.get("/dead-letters/dl_guessed0000000000000000"),
        b.client.get("/dead-letters", params={"endpoint_id": a.endpoint["id"]}),
        b.client.get("/attempts", params={"endpoint_id": a.endpoint["id"]}),
        b.client.post("/dead-letters/replay", json={"endpoint_id": a.endpoint["id"], "since": "2020-01-01T00:00:00Z",
                                                    "until": "2100-01-01T00:00:00Z"}),
        b.client.post(f"/endpoints/{a.endpoint['id']}/test", json={}),
        b.client.post(f"/endpoints/{a.endpoint['id']}/enable"),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    # Acknowledging up to a cursor past A's dead letter leaves it alone.
    cursor = a.client.get("/dead-letters").json()["next_cursor"]
    assert b.client.post("/dead-letters/ack", json={"cursor": cursor}).json() == {"acknowledged": 0}
    assert [d["id"] for d in dead_letters(a.client, a.endpoint["id"])] == [letter["id"]]
    assert b.client.get("/attempts").json()["data"] == []
    # An admin sees it.
    assert admin.get(f"/dead-letters/{letter['id']}").json()["webhook_id"] == letter["webhook_id"]


def test_replaying_to_a_disabled_endpoint_is_refused_until_it_is_enabled_again(make_tenant) -> None:
    tenant = make_tenant(1)
    (letter,) = dead_letters(tenant.client, tenant.endpoint["id"])
    tenant.client.patch(f"/endpoints/{tenant.endpoint['id']}", json={"enabled": False})
    refused = tenant.client.post(f"/dead-letters/{letter['id']}/replay")
    assert refused.status_code == 409 and "re-enable" in refused.json()["error"]["message"]
    enabled = tenant.client.post(f"/endpoints/{tenant.endpoint['id']}/enable").json()
    assert enabled["enabled"] and enabled["disabled_reason"] is None
    assert tenant.client.post(f"/dead-letters/{letter['id']}/replay").status_code == 202


def test_a_test_event_is_signed_and_delivered_through_the_retry_path(make_tenant, database) -> None:
    tenant = make_tenant(0)
    tenant.switch.healthy = True
    queued = tenant.client.post(f"/endpoints/{tenant.endpoint['id']}/test", json={"data": {"hello": "world"}})
    assert queued.status_code == 202
    webhook_id = queued.json()["webhook_id"]
    retry_path(database, {tenant.endpoint["id"]: tenant.target},
               lambda: any(r.headers["webhook-id"] == webhook_id for r in tenant.switch.recorder.requests))
    (request,) = [r for r in tenant.switch.recorder.requests if r.headers["webhook-id"] == webhook_id]
    event = Webhook(tenant.secret.text).verify(request.body, request.headers)
    assert event["type"] == "wayline.endpoint.test" and event["data"] == {"hello": "world"}
