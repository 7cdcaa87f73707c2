"""Hostile input against the real admin API: every row is refused with a 4xx in the
documented error shape and a message that says what to change, never a 500."""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass, field
from typing import Any

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
    # Size limits.
    Row("a 100 kB content filter", "POST", "/subscriptions", 422, "bytes", who="customer",
        json={"endpoint_id": "{endpoint}", "event_types": ["order.paid"], "tenant_scope": "tenants",
              "tenants": ["t-a"], "filter": {"data.x": {"$in": ["x" * 1000] * 100}}}),
    Row("a 1 MB test event", "POST", "/endpoints/{endpoint}/test", 413, "bytes", who="customer",
        json={"data": {"blob": "x" * 1_000_000}}),
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
    Row("output to an events topic", "POST", "/rules", 422, "Wayline's own",
        json=rule("SELECT * FROM events", "events.orders")),
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
        return value.format(**names) if "{endpoint}" in value else value
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
