"""The delivery store's writes against the real PostgreSQL."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from sqlalchemy import select

from wayline.delivery.attempt import Pending, Succeeded, WillRetry, settle
from wayline.delivery.retry import HeldBack
from wayline.delivery.storage.store import (
    DeliveryLogEntry,
    EndpointHealth,
    PostgresDeliveryStore,
    attempt_row,
    event_type,
)
from wayline.delivery.transports.base import FailureKind, Response

pytestmark = pytest.mark.integration


def pending(tag: str, event: str, endpoint_id: str, attempts: int = 0) -> Pending:
    first = Pending.single(event, b'{"id": "%s"}' % event.encode(), subscription_id=f"sub_{tag}",
                           endpoint_id=endpoint_id, now=datetime.now(UTC))
    return replace(first, attempts=attempts)


def logged(database, webhook_ids: list[str]) -> dict[str, tuple[object, ...]]:
    with database.transaction() as session:
        rows = session.scalars(select(DeliveryLogEntry).where(DeliveryLogEntry.webhook_id.in_(webhook_ids)))
        return {r.webhook_id: (r.endpoint_id, r.subscription_id, r.status, r.latency_ms, r.attempt, r.delivered_at)
                for r in rows}


def test_a_batch_of_successes_is_logged_column_by_column_and_a_replay_changes_nothing(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    at = datetime(2026, 11, 24, 12, 0, 0, 123456, tzinfo=UTC)
    first, retried = pending(unique, "e-1", "ep_a"), pending(unique, "e-2", "ep_b", attempts=2)
    states = [settle(first, Response(200, {}, b"", 0.0124), at, random.Random(1)),
              settle(retried, Response(204, {}, b"", 1.5), at + timedelta(seconds=1), random.Random(1))]
    assert all(isinstance(s, Succeeded) for s in states)
    store.record(states)
    expected = {
        first.webhook_id: ("ep_a", f"sub_{unique}", 200, 12, 1, at),
        retried.webhook_id: ("ep_b", f"sub_{unique}", 204, 1500, 3, at + timedelta(seconds=1)),
    }
    assert logged(database, list(expected)) == expected
    # A replayed stage writes the same rows again, later and with other answers: the first stays.
    store.record([replace(s, at=at + timedelta(hours=1), response=Response(202, {}, b"", 9.0)) for s in states])
    assert logged(database, list(expected)) == expected
    assert store.screen(list(expected), (), ()).settled == set(expected)


def test_many_successes_are_logged_in_one_write(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    at = datetime.now(UTC)
    states = [Succeeded(pending(unique, f"e-{n}", "ep_a"), Response(200, {}, b"", 0.001), at) for n in range(3000)]
    store.record(states)
    ids = [s.delivered.webhook_id for s in states]
    assert set(logged(database, ids)) == set(ids)


def cloud_event(event_id: str, kind: str) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": event_id, "source": "/shop", "type": kind, "data": {}})


def test_the_event_type_is_read_from_the_body_a_batchs_types_once_each() -> None:
    assert event_type(cloud_event("e-1", "shop.order.created")) == "shop.order.created"
    batch = b"[" + b",".join(cloud_event(f"e-{n}", kind) for n, kind in enumerate(
        ["shop.order.created", "shop.order.paid", "shop.order.created"])) + b"]"
    assert event_type(batch) == "shop.order.created, shop.order.paid"
    assert event_type(b"not json") is None and event_type(b'{"type": 7}') is None and event_type(b"[]") is None


def test_every_logged_attempt_keeps_its_event_type(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    at = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    rng = random.Random(1)
    sent = Pending.single(f"{unique}-ok", cloud_event(f"{unique}-ok", "shop.order.created"),
                          subscription_id=f"sub_{unique}", endpoint_id="ep_a", now=at)
    store.record([settle(sent, Response(204, {}, b"", 0.01), at, rng)])
    with database.transaction() as session:
        assert session.scalar(select(DeliveryLogEntry.event_type).where(
            DeliveryLogEntry.webhook_id == sent.webhook_id)) == "shop.order.created"
    # A failure and a held-back delivery: their attempt-log rows, as both paths write them.
    paid = replace(sent, payload=cloud_event(f"{unique}-ok", "shop.order.paid"))
    failed = settle(paid, Response(500, {}, b"", 0.01), at, rng)
    held = settle(paid, HeldBack(FailureKind.CIRCUIT_OPEN, "circuit open"), at, rng)
    assert isinstance(failed, WillRetry) and isinstance(held, WillRetry)
    assert attempt_row(failed, at)["event_type"] == attempt_row(held, at)["event_type"] == "shop.order.paid"


def test_one_screen_reads_what_is_settled_and_which_endpoints_are_paused(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    at = datetime.now(UTC)
    rng = random.Random(1)
    logged_one = pending(unique, "screen-ok", f"ep_{unique}_a")
    retried = pending(unique, "screen-retry", f"ep_{unique}_a")
    store.record([settle(logged_one, Response(200, {}, b"", 0.01), at, rng),
                  settle(retried, Response(503, {}, b"", 0.01), at, rng)])
    paused, resumed = f"ep_{unique}_paused", f"ep_{unique}_resumed"
    with database.transaction() as session:
        session.add_all([EndpointHealth(endpoint_id=paused, throttled_until=at + timedelta(minutes=5)),
                         EndpointHealth(endpoint_id=resumed, throttled_until=at - timedelta(seconds=1))])
    fresh = pending(unique, "screen-fresh", paused)
    screening = store.screen([logged_one.webhook_id, retried.webhook_id, fresh.webhook_id],
                             # Not a registry subscription: never gone.
                             {f"sub_{unique}"}, {paused, resumed, f"ep_{unique}_a"})
    assert screening.settled == {logged_one.webhook_id, retried.webhook_id}
    assert screening.blocked.gone == frozenset()
    assert set(screening.blocked.throttled) == {paused}
    assert screening.blocked.throttled[paused] == at + timedelta(minutes=5)
