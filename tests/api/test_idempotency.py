"""Idempotent creates keep no secret, compare secret fields too, and expire after a day."""

from __future__ import annotations

import itertools

import orjson
import pytest
from sqlalchemy import text

pytestmark = pytest.mark.integration

_keys = itertools.count()
RECEIVER = "http://127.0.0.1:9/hook"


def idempotency_key() -> str:
    return f"idem-secret-{next(_keys)}"


def stored(database, key: str) -> dict | None:
    with database.transaction() as session:
        row = session.execute(text("SELECT body::text, request_hash FROM idempotent_responses WHERE key = :key"),
                              {"key": key}).one_or_none()
    return None if row is None else {"body": row[0], "hash": row[1]}


def test_an_api_key_is_shown_once_and_never_kept_in_the_replay_record(admin, database) -> None:
    key = idempotency_key()
    first = admin.post("/api-keys", json={"name": "once", "scope": "admin"}, headers={"Idempotency-Key": key})
    assert first.status_code == 201 and first.json()["key"].startswith("wl_key_")
    record = stored(database, key)
    assert first.json()["key"] not in record["body"] and '"key"' not in record["body"]
    assert first.json()["id"] in record["body"]

    again = admin.post("/api-keys", json={"name": "once", "scope": "admin"}, headers={"Idempotency-Key": key})
    assert (again.status_code, again.headers["Idempotent-Replayed"]) == (201, "true")
    assert "key" not in again.json() and again.json()["id"] == first.json()["id"]


def test_an_endpoint_answers_its_signing_secret_once(admin, make_customer, database) -> None:
    _, client = make_customer()
    key = idempotency_key()
    body = {"url": RECEIVER, "auth": {"kind": "bearer", "token": "tok-very-secret"}}
    created = client.post("/endpoints", json=body, headers={"Idempotency-Key": key})
    assert created.status_code == 201
    secret = created.json()["secret"]
    assert secret.startswith("whsec_")
    assert [s["secret"] for s in client.get(f"/endpoints/{created.json()['id']}/secrets").json()] == [secret]
    assert "secret" not in client.get(f"/endpoints/{created.json()['id']}").json()

    record = stored(database, key)
    assert secret not in record["body"] and "tok-very-secret" not in record["body"]
    # The request is compared by a keyed hash: not the plain SHA-256 a reader could test guesses against.
    import hashlib
    plain = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert record["hash"] != plain and len(record["hash"]) == 64

    replay = client.post("/endpoints", json=body, headers={"Idempotency-Key": key})
    assert (replay.status_code, replay.json()["id"]) == (201, created.json()["id"])
    assert "secret" not in replay.json()
    changed = client.post("/endpoints", json={**body, "auth": {"kind": "bearer", "token": "other"}},
                          headers={"Idempotency-Key": key})
    assert changed.status_code == 409


def test_records_expire_after_a_day_and_are_purged(admin, database) -> None:
    old, other = idempotency_key(), idempotency_key()
    first = admin.post("/customers", json={"name": "Expiring"}, headers={"Idempotency-Key": old})
    admin.post("/customers", json={"name": "Other"}, headers={"Idempotency-Key": other})
    with database.transaction() as session:
        session.execute(text("UPDATE idempotent_responses SET created_at = now() - interval '25 hours' "
                             "WHERE key IN (:a, :b)"), {"a": old, "b": other})

    # Past 24 h the key is free again: a different body creates, it is no conflict.
    fresh = admin.post("/customers", json={"name": "Renamed"}, headers={"Idempotency-Key": old})
    assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]
    assert "Idempotent-Replayed" not in fresh.headers
    # And the create purged the other expired record on its way.
    assert stored(database, other) is None
    assert "Renamed" in stored(database, old)["body"]
