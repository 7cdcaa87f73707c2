"""The messaging API against the real broker and database: publish, idempotency, transactions,
cursor polls across restarts, topics, grants, and the refusals with their messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import orjson
import pytest

from tests.api.servers import served
from tests.conftest import messaging_app
from tests.waiting import wait_for
from wayline.registry import api_key, catalog
from wayline.registry.access import ADMIN
from wayline.stack.process import free_port

pytestmark = pytest.mark.integration


def event(n: int, tenant: str = "t-a", **overrides) -> dict:
    body = {"specversion": "1.0", "id": f"e{n}", "source": "/tests", "type": "order.created", "tenantid": tenant,
            "data": {"n": n}}
    body.update(overrides)
    return body


@pytest.fixture
def admin_http(messaging_api: str, admin_key: str) -> httpx.Client:
    with httpx.Client(base_url=messaging_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        yield client


@pytest.fixture
def topic(admin_http: httpx.Client, unique: str) -> str:
    name = f"msg.{unique}"
    created = admin_http.post("/topics", json={"name": name, "partitions": 3})
    assert created.status_code == 201, created.text
    return name


def poll_all(client: httpx.Client, topic: str, cursor: str | None = None, limit: int = 1000) -> tuple[list[dict], str]:
    params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
    response = client.get(f"/topics/{topic}/events", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    return body["records"], body["next_cursor"]


def records_in(client: httpx.Client, topic: str) -> int:
    return client.get(f"/topics/{topic}").json()["records"]


def test_published_events_read_back_exactly(admin_http, topic) -> None:
    single = admin_http.post(f"/topics/{topic}/events", json=event(0))
    assert single.status_code == 200, single.text
    assert single.json()["results"][0].keys() == {"index", "partition", "offset"}
    batch = admin_http.post(f"/topics/{topic}/events", json=[event(n, tenant=f"t-{n % 5}") for n in range(1, 21)])
    assert batch.status_code == 200
    written = {(r["partition"], r["offset"]): r["index"] + 1 for r in batch.json()["results"]}

    records, _ = poll_all(admin_http, topic)
    assert len(records) == 21
    by_position = {(r["partition"], r["offset"]): r for r in records}
    for position, n in written.items():
        assert by_position[position]["event"] == event(n, tenant=f"t-{n % 5}")
        assert by_position[position]["key"] == f"t-{n % 5}"


def test_a_mixed_batch_writes_the_good_events_and_says_why_each_bad_one_was_refused(admin_http, topic) -> None:
    missing = event(2)
    del missing["tenantid"]
    response = admin_http.post(f"/topics/{topic}/events",
                               json=[event(1), missing, event(3, data={"blob": "x" * 2000}), event(4)])
    assert response.status_code == 207
    results = response.json()["results"]
    assert [r.get("error", {}).get("code") for r in results] == [None, "missing_tenant", "oversize", None]
    assert results[1]["error"]["message"] == "event 1 (id 'e2'): the tenantid extension attribute is missing"
    assert "event 2 (id 'e3'): value is" in results[2]["error"]["message"]
    records, _ = poll_all(admin_http, topic)
    assert sorted(r["event"]["id"] for r in records) == ["e1", "e4"]


def test_a_lone_oversize_event_is_413_naming_it(admin_http, topic) -> None:
    response = admin_http.post(f"/topics/{topic}/events", json=event(9, data={"blob": "x" * 2000}))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "oversize"
    assert response.json()["error"]["message"].startswith("event 0 (id 'e9'): value is ")
    assert records_in(admin_http, topic) == 0


def test_an_event_against_its_type_schema(settings, database, admin_key, unique) -> None:
    name = f"order.{unique}"
    with database.transaction() as session:
        catalog.create_event_type(session, ADMIN, catalog.EventTypeIn(name=name, json_schema={
            "type": "object", "required": ["amount"], "properties": {"amount": {"type": "number", "minimum": 0}},
        }))
    with served(messaging_app(settings, database, schema_cache_s=0)) as base, \
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        topic = f"msg.{unique}"
        client.post("/topics", json={"name": topic, "partitions": 1})
        response = client.post(f"/topics/{topic}/events", json=[
            event(1, type=name, data={"amount": 5}), event(2, type=name, data={"amount": -1}),
        ])
    assert response.status_code == 207
    refusal = response.json()["results"][1]["error"]
    assert refusal == {"code": "schema_mismatch", "message": f"event 1 (id 'e2'): data does not match the schema of "
                                                             f"{name}: data.amount: -1 is less than the minimum of 0"}


def test_an_idempotency_key_returns_the_first_answer_and_writes_once(admin_http, topic) -> None:
    batch = [event(n) for n in range(5)]
    first = admin_http.post(f"/topics/{topic}/events", json=batch, headers={"Idempotency-Key": "k-1"})
    again = admin_http.post(f"/topics/{topic}/events", json=batch, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert records_in(admin_http, topic) == 5
    other = admin_http.post(f"/topics/{topic}/events", json=[event(9)], headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409
    assert other.json()["error"]["message"] == "this Idempotency-Key was used with a different topic or body"
    assert records_in(admin_http, topic) == 5


@pytest.mark.parametrize(("body", "status", "code", "message"), [
    (b"{not json", 400, "not_json", "the body is not JSON"),
    (b"", 422, "invalid", "the body is empty"),
    (b"[" + b",".join([orjson.dumps(event(1))] * 1001) + b"]", 413, "too_large", "the batch has 1001 events, over"),
    (b"[" + b" " * 1_048_577 + b"]", 413, "too_large", "the body is 1048579 bytes, over the limit of 1048576"),
])
def test_bodies_are_refused_before_the_broker_is_touched(admin_http, unique, body, status, code, message) -> None:
    # The topic does not exist: an answer other than 404 shows the broker was never asked.
    response = admin_http.post(f"/topics/missing.{unique}/events", content=body,
                               headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"].startswith(message)


def test_publishing_to_a_missing_topic_is_404(admin_http, unique) -> None:
    response = admin_http.post(f"/topics/missing.{unique}/events", json=event(1))
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        f"topic missing.{unique} not found: an admin creates it with POST /topics")


def test_a_committed_transaction_appears_at_once_across_two_topics(admin_http, topic, unique) -> None:
    second = f"msg.{unique}.b"
    assert admin_http.post("/topics", json={"name": second, "partitions": 1}).status_code == 201
    _, cursor_a = poll_all(admin_http, topic)
    _, cursor_b = poll_all(admin_http, second)
    txn = admin_http.post("/transactions").json()
    assert txn["state"] == "open" and txn["id"].startswith("tests~")
    assert admin_http.post(f"/transactions/{txn['id']}/topics/{topic}/events",
                           json=[event(n) for n in range(3)]).status_code == 200
    assert admin_http.post(f"/transactions/{txn['id']}/topics/{second}/events", json=event(3)).status_code == 200
    assert poll_all(admin_http, topic, cursor_a)[0] == []
    assert poll_all(admin_http, second, cursor_b)[0] == []

    done = admin_http.post(f"/transactions/{txn['id']}/commit").json()
    assert done | {"id": None} == {"id": None, "state": "committed", "written": 4, "topics": sorted([topic, second]),
                                   "timeout_s": 60.0}
    assert sorted(r["event"]["id"] for r in poll_all(admin_http, topic, cursor_a)[0]) == ["e0", "e1", "e2"]
    assert [r["event"]["id"] for r in poll_all(admin_http, second, cursor_b)[0]] == ["e3"]
    again = admin_http.post(f"/transactions/{txn['id']}/commit")
    assert again.status_code == 404


def test_an_aborted_transaction_never_appears(admin_http, topic) -> None:
    txn = admin_http.post("/transactions").json()["id"]
    admin_http.post(f"/transactions/{txn}/topics/{topic}/events", json=[event(n) for n in range(3)])
    assert admin_http.post(f"/transactions/{txn}/abort").json()["state"] == "aborted"
    admin_http.post(f"/topics/{topic}/events", json=event(99))
    records, _ = poll_all(admin_http, topic)
    assert [r["event"]["id"] for r in records] == ["e99"]


def test_a_transaction_left_open_past_its_timeout_is_aborted(settings, database, admin_key, unique) -> None:
    app = messaging_app(settings, database, instance_id="short", transaction_timeout_s=1.0)
    with served(app) as base, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"},
                                           timeout=60) as client:
        topic = f"msg.{unique}"
        client.post("/topics", json={"name": topic, "partitions": 1})
        txn = client.post("/transactions").json()["id"]
        assert client.post(f"/transactions/{txn}/topics/{topic}/events", json=event(1)).status_code == 200
        wait_for(lambda: client.get(f"/transactions/{txn}").status_code == 404,
                 "the transaction to be aborted past its timeout", 30)
        late = client.post(f"/transactions/{txn}/commit")
        assert late.status_code == 404
        assert late.json()["error"]["message"].startswith(f"transaction {txn} not found")
        client.post(f"/topics/{topic}/events", json=event(2))
        records, _ = poll_all(client, topic)
        assert [r["event"]["id"] for r in records] == ["e2"]


def customer_key(database, name: str) -> api_key.NewApiKey:
    from wayline.registry import customer

    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name=name))
        return api_key.create(session, ADMIN, api_key.ApiKeyIn(name=name, scope="customer", customer_id=owner.id))


def test_a_transaction_needs_a_publish_grant_and_one_key_holds_few(settings, database, admin_key, unique) -> None:
    key = customer_key(database, f"txn-{unique}")
    app = messaging_app(settings, database, instance_id=f"share-{unique}", auth_cache_s=0, transaction_producers=3,
                        transactions_per_key=2)
    with served(app) as base, \
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as admin, \
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key.key}"}, timeout=60) as client:
        refused = client.post("/transactions")
        assert refused.status_code == 403
        assert refused.json()["error"]["message"] == (
            "this API key may not publish any topic, so it may not begin a transaction: an admin grants it with "
            "POST /topic-grants")
        admin.post("/topic-grants", json={"api_key_id": key.id, "pattern": f"msg.{unique}.*", "actions": ["poll"]})
        assert client.post("/transactions").status_code == 403
        admin.post("/topic-grants", json={"api_key_id": key.id, "pattern": f"msg.{unique}.*", "actions": ["publish"]})
        held = [client.post("/transactions") for _ in range(2)]
        assert [r.status_code for r in held] == [201, 201]
        third = client.post("/transactions")
        assert (third.status_code, third.json()["error"]["code"]) == (429, "rate_limited")
        assert third.json()["error"]["message"].startswith("this API key holds 2 open transactions on instance share-")
        assert admin.post("/transactions").status_code == 201  # the pool's last producer is still free for others
        client.post(f"/transactions/{held[0].json()['id']}/abort")
        assert client.post("/transactions").status_code == 201


def test_a_crashed_instance_s_open_transaction_is_fenced_when_it_starts_again(
    settings, database, admin_key, unique, tmp_path,
) -> None:
    """Without the fence at start, read_committed readers of the partition stall until the broker
    aborts the transaction (transaction_timeout_s + 30 s = 90 s) or that slot begins again."""
    instance, topic = f"crash-{unique}", f"msg.{unique}"
    headers = {"Authorization": f"Bearer {admin_key}"}
    port = free_port()
    environment = os.environ | {
        "WAYLINE_STATE_DIR": str(settings.state_dir), "WAYLINE_MESSAGING__INSTANCE_ID": instance,
        "WAYLINE_KAFKA__BOOTSTRAP_SERVERS": settings.kafka_bootstrap(), "WAYLINE_POSTGRES__DSN": settings.postgres_dsn(),
    }
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "wayline.cli.main", "serve", "messaging", "--port", str(port)],
                                  env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as crashing:
            def healthy() -> bool:
                try:
                    if crashing.get("/health").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                return False

            wait_for(healthy, "the messaging server to answer", 60)
            assert crashing.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
            txn = crashing.post("/transactions").json()["id"]
            assert crashing.post(f"/transactions/{txn}/topics/{topic}/events", json=event(1)).status_code == 200
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # no shutdown: the transaction stays open on the broker
        server.wait(timeout=30)

    with served(messaging_app(settings, database, instance_id=instance)) as base, \
            httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        assert client.post(f"/topics/{topic}/events", json=event(2)).status_code == 200
        seen: list[dict] = []
        cursor = None

        def polled() -> bool:
            nonlocal seen, cursor
            response = client.get(f"/topics/{topic}/events", params={"wait_s": 2} | ({"cursor": cursor} if cursor else {}))
            seen, cursor = response.json()["records"], response.json()["next_cursor"]
            return bool(seen)

        # Each poll waits up to 2 s for a record itself.
        wait_for(polled, "a record: the crashed transaction still holds back read_committed readers", 20, every_s=0)
    assert [r["event"]["id"] for r in seen] == ["e2"], "the crashed transaction still holds back read_committed readers"


def test_a_transaction_of_another_instance_is_misdirected(admin_http) -> None:
    response = admin_http.post("/transactions/elsewhere~0~abc/commit")
    assert response.status_code == 421
    assert response.headers["Wayline-Instance"] == "elsewhere"
    assert response.json()["error"]["message"] == (
        "transaction elsewhere~0~abc lives on instance elsewhere, not on this one (tests): send it to elsewhere")


def test_cursor_paging_returns_every_record_once_in_partition_order_across_restarts(
    settings, database, admin_key, unique,
) -> None:
    topic = f"msg.{unique}"
    headers = {"Authorization": f"Bearer {admin_key}"}
    seen: list[dict] = []
    cursor = None
    with served(messaging_app(settings, database, instance_id="a")) as base:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            client.post("/topics", json={"name": topic, "partitions": 3})
            client.post(f"/topics/{topic}/events", json=[event(n, tenant=f"t-{n}") for n in range(40)])
            for _ in range(3):
                page, cursor = poll_all(client, topic, cursor, limit=7)
                seen += page
    # A new instance (a restart) goes on from the cursor alone; more events arrive meanwhile.
    with served(messaging_app(settings, database, instance_id="b")) as base:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            client.post(f"/topics/{topic}/events", json=[event(n, tenant=f"t-{n}") for n in range(40, 60)])
            while True:
                page, cursor = poll_all(client, topic, cursor, limit=7)
                if not page:
                    break
                seen += page
    assert sorted(r["event"]["id"] for r in seen) == sorted(f"e{n}" for n in range(60))
    for partition in range(3):
        offsets = [r["offset"] for r in seen if r["partition"] == partition]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_a_poll_starts_at_latest_and_waits_for_a_record(admin_http, topic) -> None:
    admin_http.post(f"/topics/{topic}/events", json=event(1))
    empty = admin_http.get(f"/topics/{topic}/events", params={"start": "latest"}).json()
    assert empty["records"] == []
    admin_http.post(f"/topics/{topic}/events", json=event(2))
    waited = admin_http.get(f"/topics/{topic}/events", params={"cursor": empty["next_cursor"], "wait_s": 5}).json()
    assert [r["event"]["id"] for r in waited["records"]] == ["e2"]


def test_latest_is_where_read_committed_readers_stand_so_an_open_transaction_is_not_skipped(admin_http, topic) -> None:
    txn = admin_http.post("/transactions").json()["id"]
    admin_http.post(f"/transactions/{txn}/topics/{topic}/events", json=[event(1), event(2)])
    latest = admin_http.get(f"/topics/{topic}/events", params={"start": "latest"}).json()
    assert latest["records"] == []
    admin_http.post(f"/transactions/{txn}/commit")
    records, _ = poll_all(admin_http, topic, latest["next_cursor"])
    assert sorted(r["event"]["id"] for r in records) == ["e1", "e2"]


def test_a_cursor_behind_retention_resumes_at_the_oldest_record_kept(admin_http, settings, unique) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"msg.{unique}"
    admin_http.post("/topics", json={"name": topic, "partitions": 1})
    start = admin_http.get(f"/topics/{topic}/events").json()["next_cursor"]
    admin_http.post(f"/topics/{topic}/events", json=[event(n) for n in range(5)])
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap()})
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(timeout=30)
    records, _ = poll_all(admin_http, topic, start)
    assert [(r["offset"], r["event"]["id"]) for r in records] == [(3, "e3"), (4, "e4")]


def test_poll_limits_and_bad_cursors_are_refused(admin_http, topic) -> None:
    too_many = admin_http.get(f"/topics/{topic}/events", params={"limit": 5000})
    assert (too_many.status_code, too_many.json()["error"]["message"]) == (422, "limit: at most 1000")
    bad = admin_http.get(f"/topics/{topic}/events", params={"cursor": "garbage"})
    assert (bad.status_code, bad.json()["error"]["message"]) == (422, "cursor: not a cursor this API returned")


def test_topics_are_created_described_listed_and_deleted(admin_http, unique) -> None:
    name = f"msg.{unique}.admin"
    created = admin_http.post("/topics", json={"name": name, "partitions": 2, "retention_ms": 3_600_000})
    assert created.status_code == 201
    assert created.json() == {"name": name, "retention_ms": 3_600_000, "records": 0, "partitions": [
        {"partition": 0, "earliest_offset": 0, "latest_offset": 0},
        {"partition": 1, "earliest_offset": 0, "latest_offset": 0}]}
    assert admin_http.post("/topics", json={"name": name}).json()["error"] == {
        "code": "conflict", "message": f"topic {name} already exists"}
    assert name in admin_http.get("/topics").json()["data"]
    assert admin_http.delete(f"/topics/{name}").status_code == 204
    assert admin_http.get(f"/topics/{name}").status_code == 404


def test_keys_and_grants(messaging_api, admin_http, topic, database) -> None:
    assert httpx.post(f"{messaging_api}/topics/{topic}/events", json=event(1)).json()["error"] == {
        "code": "unauthorized", "message": "no API key: send `Authorization: Bearer <key>`"}
    wrong = httpx.post(f"{messaging_api}/topics/{topic}/events", json=event(1),
                       headers={"Authorization": "Bearer wl_key_nope"})
    assert (wrong.status_code, wrong.json()["error"]["message"]) == (401, "unknown API key")

    from wayline.registry import customer

    with database.transaction() as session:
        owner = customer.create(session, ADMIN, customer.CustomerIn(name="publisher"))
        key = api_key.create(session, ADMIN, api_key.ApiKeyIn(name="pub", scope="customer", customer_id=owner.id))
    headers = {"Authorization": f"Bearer {key.key}"}
    with httpx.Client(base_url=messaging_api, headers=headers, timeout=60) as client:
        refused = client.post(f"/topics/{topic}/events", json=event(1))
        assert refused.status_code == 403
        assert refused.json()["error"]["message"] == (
            f"this API key may not publish topic {topic}: an admin grants it with POST /topic-grants")
        grant = admin_http.post("/topic-grants",
                                json={"api_key_id": key.id, "pattern": "msg.*", "actions": ["publish"]})
        assert grant.status_code == 201
        assert client.post(f"/topics/{topic}/events", json=event(1)).status_code == 200
        assert client.get(f"/topics/{topic}/events").status_code == 403
        assert client.post("/topics", json={"name": "msg.customer"}).json()["error"] == {
            "code": "forbidden", "message": "this operation needs an admin key"}
        assert client.post("/topic-grants", json={"api_key_id": key.id, "pattern": "*", "actions": ["poll"]}
                           ).status_code == 403
        txn = client.post("/transactions").json()["id"]
        # A transaction belongs to the key that began it.
        assert admin_http.post(f"/transactions/{txn}/commit").status_code == 404
        assert client.post(f"/transactions/{txn}/abort").json()["state"] == "aborted"


def test_the_admin_api_can_carry_the_messaging_api(api_settings, database, admin_key, unique) -> None:
    from wayline.api.app import create_app
    from wayline.api.messaging import mount

    app = create_app(api_settings, database)
    mount(app, api_settings, database)
    with served(app) as base, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"},
                                           timeout=60) as client:
        assert client.get("/customers").status_code == 200
        topic = f"msg.{unique}"
        assert client.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        assert client.post(f"/topics/{topic}/events", json=event(1)).json()["results"][0]["offset"] == 0


def test_the_openapi_document_describes_bodies_and_errors_for_client_generators(base_settings) -> None:
    from wayline.api.messaging import create_messaging_app

    document = create_messaging_app(base_settings, None).openapi()  # type: ignore[arg-type]
    publish = document["paths"]["/topics/{topic}/events"]["post"]
    assert publish["requestBody"]["content"]["application/json"]["schema"]["oneOf"][0] == {
        "$ref": "#/components/schemas/CloudEvent"}
    assert {"200", "207", "401", "403", "404", "413", "422", "503"} <= publish["responses"].keys()
    assert document["components"]["schemas"]["CloudEvent"]["required"] == [
        "specversion", "id", "source", "type", "tenantid"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path != "/health":
                assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorOut"}, (method, path)
