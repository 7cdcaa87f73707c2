"""Hostile input against the real admin API: every row is refused with a 4xx in the
documented error shape and a message that says what to change, never a 500."""

from __future__ import annotations

import base64
import itertools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

_seq = itertools.count()
RECEIVER = "http://127.0.0.1:9/hook"


def rule(sql: str, topic: str = "rules.out.hostile") -> dict:
    return {"name": f"hostile-{next(_seq)}", "sql": sql, "output_topic": topic, "output_type": "alert.hostile"}


def window(size: str, slide: str | None = None) -> dict:
    args = f"'{size}'" + (f", '{slide}'" if slide else "")
    return rule(f"SELECT tenantid, COUNT(*) AS n FROM events GROUP BY tenantid, window(event_time, {args})")


def pattern(define: str, within: str = "INTERVAL '5' MINUTE") -> dict:
    return rule(f"""SELECT * FROM events MATCH_RECOGNIZE (
      PARTITION BY tenantid ORDER BY event_time MEASURES COUNT(A.*) AS n
      PATTERN (A B) WITHIN {within}
      DEFINE A AS {define}, B AS B.type = 'b')""")


def reconciliation(output_topic: str) -> dict:
    return {"name": f"hostile-{next(_seq)}", "expected": {"role": "producer-expected", "topics": ["audit.orders"]},
            "actual": {"role": "actual", "topics": ["events.orders"]},
            "periods": {"o": 60, "n": 10, "m": 600, "z": 60}, "output_topic": output_topic}


def nested(levels: int, key: bytes) -> bytes:
    """JSON text nested ``levels`` objects deep (written out: encoding it would recurse here)."""
    return (b'{"' + key + b'": ') * (levels - 1) + b'{"type": "object"}' + b"}" * (levels - 1)


JSON = {"Content-Type": "application/json"}


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@dataclass
class Row:
    id: str
    method: str
    path: str
    status: int
    message: str  # a fragment the message must contain
    json: Any = None
    content: bytes | None = None
    who: str = "admin"  # or "customer": a key of a customer that owns tenant t-a and an endpoint
    headers: dict[str, str] = field(default_factory=dict)
    before: int = 0  # send the same request this many times first (rates, idempotent replays)
    first: Any = None  # the body of those earlier requests, when it differs


ROWS = [
    # Deeply nested rule SQL: parsing and compiling recurse.
    Row("49 nested parentheses", "POST", "/rules", 422, "nests too deeply",
        json=rule("SELECT * FROM events WHERE " + "(" * 49 + "type = 'x'" + ")" * 49)),
    Row("3,000 x NOT", "POST", "/rules", 422, "nests too deeply",
        json=rule("SELECT * FROM events WHERE " + "NOT " * 3000 + "type = 'x'")),
    Row("3,000-term DEFINE", "POST", "/rules", 422, "nests too deeply",
        json=pattern("A.data.x > " + "+".join(["1"] * 3000))),
    # Durations that overflow or are not numbers.
    Row("window of 1e20 days", "POST", "/rules", 422, "longer than", json=window("1e20 days")),
    Row("window of NaN days", "POST", "/rules", 422, "not a finite number", json=window("NaN days")),
    Row("window of Infinity days", "POST", "/rules", 422, "not a finite number", json=window("Infinity days")),
    Row("WITHIN 10^20 days", "POST", "/rules", 422, "longer than",
        json=pattern("A.type = 'a'", "INTERVAL '100000000000000000000' DAY")),
    Row("WITHIN Infinity days", "POST", "/rules", 422, "not a finite number",
        json=pattern("A.type = 'a'", "INTERVAL 'Infinity' DAY")),
    Row("WITHIN NaN days", "POST", "/rules", 422, "not a finite number",
        json=pattern("A.type = 'a'", "INTERVAL 'NaN' DAY")),
    # Hopping windows that would put one event in millions of windows.
    Row("1 day sliding by 1 ms", "POST", "/rules", 422, "windows per event",
        json=window("1 day", "1 millisecond")),
    # NUL characters, which PostgreSQL text cannot hold.
    Row("NUL in a name", "POST", "/customers", 422, "NUL", json={"name": "Acme\u0000"}),
    Row("NUL in a filter", "POST", "/subscriptions", 422, "NUL", who="customer",
        json={"endpoint_id": "{endpoint}", "event_types": ["order.paid"], "tenant_scope": "tenants",
              "tenants": ["t-a"], "filter": {"data.x": "a\u0000"}}),
    Row("NUL in a cursor", "GET", f"/endpoints?cursor={cursor('ep_' + chr(0))}", 422, "NUL"),
    Row("NUL in a path parameter", "GET", "/endpoints/ep_%00", 422, "NUL"),
    Row("NUL in a query parameter", "GET", "/subscriptions?endpoint_id=ep_%00", 422, "NUL"),
    # Bodies that are not JSON, or nest past any sense.
    Row("invalid JSON", "POST", "/customers", 422, "not valid JSON", content=b'{"name": "Acme",',
        headers={"Content-Type": "application/json"}),
    Row("JSON nested 100,000 deep", "POST", "/customers", 422, "not valid JSON",
        content=b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", headers={"Content-Type": "application/json"}),
    Row("a JSON schema nested 500 deep", "POST", "/event-types", 422, "nests more than 100 levels",
        content=b'{"name": "hostile.deep", "json_schema": ' + nested(500, b"properties") + b"}", headers=JSON),
    Row("a filter nested 900 deep", "POST", "/subscriptions", 422, "nests", who="customer",
        content=b'{"endpoint_id": "{endpoint}", "event_types": ["order.paid"], "tenant_scope": "tenants", '
                b'"tenants": ["t-a"], "filter": ' + nested(900, b"$not") + b"}", headers=JSON),
    Row("unknown route", "GET", "/no-such-thing", 404, "no route"),
    # Event types' JSON Schemas: invalid ones would fail every publish of the type.
    Row("a schema whose type is a number", "POST", "/event-types", 422, "at type: 12 is not valid",
        json={"name": "hostile.schema", "json_schema": {"type": 12}}),
    Row("a schema whose type is no type", "POST", "/event-types", 422, "not a usable JSON Schema: at type",
        json={"name": "hostile.schema", "json_schema": {"type": "nonsense"}}),
    Row("a schema with a $ref to a URL", "POST", "/event-types", 422, "Wayline fetches no schema",
        json={"name": "hostile.schema", "json_schema": {"$ref": "http://127.0.0.1:9/schema.json"}}),
    Row("a pattern that needs backtracking", "POST", "/event-types", 422, "without backtracking",
        json={"name": "hostile.schema", "json_schema": {"properties": {"s": {"pattern": "^(a)\\1$"}}}}),
    Row("a schema updated to an invalid one", "PATCH", "/event-types/order.paid", 422, "not a usable JSON Schema",
        json={"json_schema": {"type": 12}}),
    # Size limits.
    Row("a 100 kB content filter", "POST", "/subscriptions", 422, "bytes", who="customer",
        json={"endpoint_id": "{endpoint}", "event_types": ["order.paid"], "tenant_scope": "tenants",
              "tenants": ["t-a"], "filter": {"data.x": {"$in": ["x" * 1000] * 100}}}),
    Row("a 1 MB test event", "POST", "/endpoints/{endpoint}/test", 413, "bytes", who="customer",
        json={"data": {"blob": "x" * 1_000_000}}),
    Row("a lone surrogate in a test event's data", "POST", "/endpoints/{endpoint}/test", 422, "lone surrogates",
        who="customer", content=b'{"data": {"note": "\\ud800"}}', headers=JSON),
    Row("test events faster than the limit", "POST", "/endpoints/{endpoint}/test", 429, "test events",
        who="customer", json={"data": {"n": 1}}, before=10),
    # Leaks and gaps.
    Row("a tenant that does not exist, asked by a customer", "POST", "/subscriptions", 403, "may not subscribe",
        who="customer", json={"endpoint_id": "{endpoint}", "event_types": ["order.paid"],
                              "tenant_scope": "tenants", "tenants": ["no-such-tenant"]}),
    Row("a key with both ' and \" in a rule's data path", "POST", "/rules", 422, "both",
        json=rule("SELECT * FROM events WHERE data.\"it's \"\"x\"\"\" = 'y'")),
    Row("a Spark variable reference in a rule", "POST", "/rules", 422, "${",
        json=rule("SELECT '${env:WAYLINE_STATE_DIR}' AS x FROM events")),
    Row("output to the quarantine topic", "POST", "/rules", 422, "Wayline's own",
        json=rule("SELECT * FROM events", "wayline.quarantine")),
    Row("output to the rules control topic", "POST", "/rules", 422, "Wayline's own",
        json=rule("SELECT * FROM events", "wayline.rules.control")),
    Row("output to an events topic", "POST", "/rules", 422, "one of the event topics",
        json=rule("SELECT * FROM events", "events.orders")),
    # Wayline's own topics, which its jobs trust (issue 23).
    Row("output to the senders' work topic", "POST", "/rules", 422, "output_topic: wayline.delivery.work is reserved",
        json=rule("SELECT * FROM events", "wayline.delivery.work")),
    Row("output to the audit outcomes", "POST", "/rules", 422, "output_topic: wayline.audit.outcomes is reserved",
        json=rule("SELECT * FROM events", "wayline.audit.outcomes")),
    Row("a reconciliation writing to the audit outcomes", "POST", "/reconciliations", 422,
        "output_topic: wayline.audit.outcomes is reserved", json=reconciliation("wayline.audit.outcomes")),
    Row("a reconciliation writing to the broker's offsets", "POST", "/reconciliations", 422,
        "output_topic: __consumer_offsets is reserved", json=reconciliation("__consumer_offsets")),
    Row("a bearer token with CR/LF", "POST", "/endpoints", 422, "Authorization header", who="customer",
        json={"url": RECEIVER, "auth": {"kind": "bearer", "token": "t0ken\r\nX-Injected: 1"}}),
    Row("a bearer token changed to one with CR/LF", "PATCH", "/endpoints/{endpoint}", 422, "Authorization header",
        who="customer", json={"auth": {"kind": "bearer", "token": "t0ken\nX-Injected: 1"}}),
    Row("a replay whose secret differs", "POST", "/endpoints", 409, "different request", who="customer",
        headers={"Idempotency-Key": "replay-secret"}, before=1,
        first={"url": RECEIVER, "auth": {"kind": "bearer", "token": "first"}},
        json={"url": RECEIVER, "auth": {"kind": "bearer", "token": "second"}}),
]


@pytest.fixture
def world(make_customer, catalog) -> dict:
    customer, client = make_customer(["t-a"])
    endpoint = client.post("/endpoints", json={"url": RECEIVER})
    assert endpoint.status_code == 201, endpoint.text
    return {"customer": client, "endpoint": endpoint.json()["id"]}


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names) if any(f"{{{name}}}" in value for name in names) else value
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_hostile_input_is_refused_with_the_error_shape(row: Row, admin, world) -> None:
    client = world["customer"] if row.who == "customer" else admin
    names = {"endpoint": world["endpoint"]}
    path = row.path.replace("{endpoint}", names["endpoint"])

    def send(body: Any) -> Any:
        if row.content is not None:
            content = row.content.replace(b"{endpoint}", names["endpoint"].encode())
            return client.request(row.method, path, content=content, headers=row.headers)
        return client.request(row.method, path, json=_fill(body, names), headers=row.headers)

    for _ in range(row.before):
        earlier = send(row.first if row.first is not None else row.json)
        assert earlier.status_code < 300, earlier.text
    response = send(row.json)
    assert response.status_code == row.status, response.text[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert row.message in body["error"]["message"], body["error"]["message"]


def operational(tenant: str) -> dict:
    """A forged `wayline.endpoint.disabled`: the delivery job would send it, signed, to the customer it names."""
    return {"specversion": "1.0", "id": f"forged-{next(_seq)}", "source": "/wayline/delivery",
            "type": "wayline.endpoint.disabled", "tenantid": tenant, "data": {"reason": "forged"}}


def plain_event() -> dict:
    return {"specversion": "1.0", "id": f"plain-{next(_seq)}", "source": "/tests", "type": "order.created",
            "tenantid": "t-a", "data": {}}


# The messaging API and Wayline's own topics (issue 23): "customer" is a key granted publish and poll on `*`.
MESSAGING_ROWS = [
    Row("publish to the work topic as admin", "POST", "/topics/wayline.delivery.work/events", 403,
        "topic wayline.delivery.work is reserved, this API key may not publish it", json=plain_event()),
    Row("publish to the work topic, granted *", "POST", "/topics/wayline.delivery.work/events", 403,
        "topic wayline.delivery.work is reserved", json=plain_event(), who="customer"),
    Row("a batch to the quarantine, granted *", "POST", "/topics/wayline.quarantine/events", 403,
        "topic wayline.quarantine is reserved", json=[plain_event(), plain_event()], who="customer"),
    Row("publish to the batching topic as admin", "POST", "/topics/wayline.delivery.batching/events", 403,
        "is reserved", json=plain_event()),
    Row("publish to an audit topic as admin", "POST", "/topics/wayline.audit.outcomes/events", 403,
        "is reserved", json=plain_event()),
    Row("a forged operations event on the operations topic", "POST", "/topics/events.wayline.operations/events",
        403, "topic events.wayline.operations is reserved", json=operational("{other_customer}")),
    Row("a forged operations event on an event topic", "POST", "/topics/{topic}/events", 422,
        "type wayline.endpoint.disabled is reserved", json=operational("{other_customer}"), who="customer"),
    Row("publish into a transaction to the audit topic", "POST",
        "/transactions/{transaction}/topics/wayline.audit.consumed/events", 403,
        "topic wayline.audit.consumed is reserved", json=plain_event(), who="customer"),
    Row("poll the quarantine, granted *", "GET", "/topics/wayline.quarantine/events", 403,
        "this API key may not poll it", who="customer"),
    Row("DELETE /topics/__consumer_offsets", "DELETE", "/topics/__consumer_offsets", 403,
        "topic __consumer_offsets is reserved, this API key may not delete it: topics named __* are the Kafka "
        "broker's own"),
    Row("delete the rules control topic", "DELETE", "/topics/wayline.rules.control", 403, "is reserved"),
    Row("create a topic under wayline.", "POST", "/topics", 403,
        "topic wayline.mine is reserved, this API key may not create it", json={"name": "wayline.mine"}),
    Row("a grant on the work topic", "POST", "/topic-grants", 422,
        "pattern: wayline.delivery.work matches reserved topics only",
        json={"api_key_id": "{customer_key}", "pattern": "wayline.delivery.work", "actions": ["publish"]}),
    Row("a grant on the broker's topics", "POST", "/topic-grants", 422, "pattern: __* matches reserved topics only",
        json={"api_key_id": "{customer_key}", "pattern": "__*", "actions": ["poll"]}),
]


@pytest.fixture
def messaging_clients(messaging_api, admin_api, admin_key, unique) -> Any:
    """An admin and a customer client of the messaging API, the customer's key granted publish and poll on
    `*`, an event topic, an open transaction of the customer's, and another customer to forge events to."""
    from tests.api.conftest import Client

    admin_registry = Client(admin_api, admin_key)
    other = admin_registry.post("/customers", json={"name": f"forged-to-{unique}"}).json()
    owner = admin_registry.post("/customers", json={"name": f"granted-{unique}"}).json()
    key = admin_registry.post("/api-keys", json={"name": f"star-{unique}", "scope": "customer",
                                                 "customer_id": owner["id"]}).json()
    admin = Client(messaging_api, admin_key)
    granted = admin.post("/topic-grants", json={"api_key_id": key["id"], "pattern": "*",
                                                "actions": ["publish", "poll"]})
    assert granted.status_code == 201, granted.text
    topic = f"events.hostile-{unique}"
    assert admin.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    customer = Client(messaging_api, key["key"])
    transaction = customer.post("/transactions")
    assert transaction.status_code == 201, transaction.text
    names = {"topic": topic, "transaction": transaction.json()["id"], "customer_key": key["id"],
             "other_customer": other["id"]}
    yield {"admin": admin, "customer": customer}, names
    customer.post(f"/transactions/{names['transaction']}/abort")


@pytest.mark.parametrize("row", MESSAGING_ROWS, ids=[row.id for row in MESSAGING_ROWS])
def test_hostile_messaging_input_is_refused_with_the_error_shape(row: Row, messaging_clients) -> None:
    clients, names = messaging_clients
    path = row.path.format(**names)
    response = clients[row.who].request(row.method, path, json=_fill(row.json, names), headers=row.headers)
    assert response.status_code == row.status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"code", "message"}, error
    assert row.message in error["message"], error["message"]

# The same for the messaging API, as an admin key, on a topic made for them.
TOPIC = "hostile.messaging"


def ce(**changes: Any) -> dict:
    event = {"specversion": "1.0", "id": "h-1", "source": "/hostile", "type": "order.created", "tenantid": "t-a",
             "data": {"n": 1}}
    return event | changes


ENVELOPE_ROWS = [
    Row("a cursor offset of 2^63", "GET",
        f"/topics/{TOPIC}/events?cursor=" + cursor(f'{{"v":1,"t":"{TOPIC}","o":{{"0":{2**63}}}}}'),
        422, "not a cursor this API returned"),
    Row("a start before 1970", "GET", f"/topics/{TOPIC}/events?start=0001-01-01T00:00:00Z", 422, "before 1970"),
    Row("a transaction id with a superscript digit", "GET", "/transactions/vm~%C2%B2~x", 422,
        "not one this API returned"),
    # CloudEvents that the envelope rules (wayline.core.envelope) refuse, as the pipelines would quarantine them.
    Row("an object type", "POST", f"/topics/{TOPIC}/events", 422, "attribute(s) type: a JSON object",
        json=ce(type={"name": "order.created"})),
    Row("data_base64 that is not base64", "POST", f"/topics/{TOPIC}/events", 422, "data_base64 is not base64",
        json=ce(data_base64="not base64!")),
    Row("an upper-case extension name", "POST", f"/topics/{TOPIC}/events", 422, "attribute name tenantId",
        json=ce(tenantId="t-b")),
    Row("a CR/LF in tenantid", "POST", f"/topics/{TOPIC}/events", 422, "attribute(s) tenantid",
        json=ce(tenantid="t-a\r\nX-Injected: 1")),
]


@pytest.fixture(scope="module")
def messaging_admin(messaging_api: str, admin_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=messaging_api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        created = client.post("/topics", json={"name": TOPIC, "partitions": 1})
        assert created.status_code == 201, created.text
        yield client


@pytest.mark.parametrize("row", ENVELOPE_ROWS, ids=[row.id for row in ENVELOPE_ROWS])
def test_hostile_input_to_the_messaging_api_is_refused(row: Row, messaging_admin: httpx.Client) -> None:
    response = messaging_admin.request(row.method, row.path, json=row.json, headers=row.headers)
    assert response.status_code == row.status, response.text[:500]
    body = response.json()
    # A refused publish also carries its per-event results.
    assert set(body) - {"results"} == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert row.message in body["error"]["message"], body["error"]["message"]


def test_a_schema_can_be_updated_and_no_pattern_holds_a_publish(admin, settings, database, admin_key) -> None:
    from tests.api.servers import served
    from tests.conftest import messaging_app

    name = f"hostile.redos.{next(_seq)}"
    assert admin.post("/event-types", json={"name": name}).status_code == 201
    updated = admin.patch(f"/event-types/{name}", json={"json_schema": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}})
    assert updated.status_code == 200, updated.text
    assert admin.get(f"/event-types/{name}").json()["json_schema"]["properties"]["s"]["pattern"] == "^(a+)+$"
    with served(messaging_app(settings, database, schema_cache_s=0)) as base, \
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60) as client:
        topic = f"{TOPIC}.{next(_seq)}"
        assert client.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201

        def publish(text: str) -> httpx.Response:
            return client.post(f"/topics/{topic}/events", json=ce(type=name, data={"s": text}))

        started = time.monotonic()
        # A backtracking engine takes about 2^27 steps here; Python's re held the server for seconds.
        refused = publish("a" * 27 + "!")
        assert time.monotonic() - started < 2
        assert refused.status_code == 422, refused.text
        assert "does not match" in refused.json()["error"]["message"]
        assert publish("a" * 27).status_code == 200
        assert admin.patch(f"/event-types/{name}", json={"json_schema": None}).status_code == 200
        assert publish("a" * 27 + "!").status_code == 200

# Bodies over the request limit: the servers run in this process, so its resident memory is theirs.
MiB = 1 << 20


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def streamed_json(size: int, head: bytes) -> Iterator[bytes]:
    """A JSON object of ``size`` bytes (a huge array of zeros after ``head``), made as it is
    sent, so that the client holds none of it: what grows here is the server's doing."""
    opening, chunk, closing = head + b'"pad": [', b"0," * 32_768, b"0]}"
    yield opening
    left = size - len(opening) - len(closing)
    while left >= len(chunk):
        yield chunk
        left -= len(chunk)
    yield b" " * left + closing


def send_big(base: str, path: str, key: str | None, *, declared: bool, size: int = 20 * MiB) -> tuple[httpx.Response, float, int]:
    """POST a ``size``-byte body (its length declared, or chunked); the answer, the seconds it
    took, and how far this process's resident memory rose meanwhile."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    if declared:
        headers["Content-Length"] = str(size)
    baseline, peak, done = resident_bytes(), [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident_bytes())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        response = httpx.post(f"{base}{path}", content=streamed_json(size, b'{"url": "' + RECEIVER.encode() + b'", '),
                              headers=headers, timeout=60)
    finally:
        done.set()
        watcher.join()
    return response, time.monotonic() - started, peak[0] - baseline


def assert_refused(response: httpx.Response, status: int, message: str) -> None:
    assert response.status_code == status, response.text[:500]
    assert response.json()["error"]["code"] in ("unauthorized", "too_large")
    assert message in response.json()["error"]["message"]


@pytest.mark.parametrize("declared", [True, False], ids=["Content-Length", "chunked"])
def test_a_stranger_s_20_mb_body_is_refused_unread(admin_api: str, declared: bool) -> None:
    response, seconds, grown = send_big(admin_api, "/endpoints", None, declared=declared)
    # Declared over the limit: refused before anything else; chunked: the missing key is refused first.
    assert_refused(response, 413 if declared else 401, "over the limit of 4194304" if declared else "no API key")
    assert seconds < 5
    assert grown < 32 * MiB, f"the server grew by {grown / MiB:.0f} MiB"


def test_a_chunked_body_is_counted_and_refused_past_the_limit(admin_api: str, admin_key: str) -> None:
    response, _, grown = send_big(admin_api, "/endpoints", admin_key, declared=False)
    assert_refused(response, 413, "the body is over the limit of 4194304 bytes")
    assert grown < 32 * MiB, f"the server grew by {grown / MiB:.0f} MiB"


def test_the_messaging_server_limits_bodies_and_authenticates_first(messaging_api: str, admin_key: str) -> None:
    response, _, grown = send_big(messaging_api, "/topics", None, declared=False)
    assert_refused(response, 401, "no API key")
    assert grown < 32 * MiB, f"the server grew by {grown / MiB:.0f} MiB"
    response, _, _ = send_big(messaging_api, "/topics/hostile.big/events", admin_key, declared=False, size=2 * MiB)
    assert_refused(response, 413, "the body is over the limit of 1048576 bytes")
    response, _, _ = send_big(messaging_api, "/topics", admin_key, declared=True, size=2 * MiB)
    assert_refused(response, 413, "the body is 2097152 bytes, over the limit of 1048576")


def test_bodies_under_the_limit_still_work(admin) -> None:
    size = 3 * MiB  # under the admin API's limit, over the messaging one's
    rows = [{"key": f"k{n}", "data": {"pad": "x" * 300}} for n in range(size // 330)]
    table = f"big_{next(_seq)}"
    assert admin.post("/reference-tables", json={"name": table}).status_code == 201
    put = admin.put(f"/reference-tables/{table}/rows", json=rows)
    assert put.status_code == 200, put.text[:500]
