"""The delivery store's writes against the real PostgreSQL."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from wayline.delivery.attempt import Pending, Succeeded, settle
from wayline.delivery.storage.store import DeliveryLogEntry, PostgresDeliveryStore
from wayline.delivery.transport import Response

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
    assert store.settled(list(expected)) == set(expected)


def test_many_successes_are_logged_in_one_write(database, unique: str) -> None:
    store = PostgresDeliveryStore(database.engine)
    at = datetime.now(UTC)
    states = [Succeeded(pending(unique, f"e-{n}", "ep_a"), Response(200, {}, b"", 0.001), at) for n in range(3000)]
    store.record(states)
    ids = [s.delivered.webhook_id for s in states]
    assert set(logged(database, ids)) == set(ids)
