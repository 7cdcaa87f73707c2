"""The in-memory store behaves as the PostgreSQL one does where tests rely on it."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from wayline.delivery.attempt import Pending, settle
from wayline.delivery.memory import MemoryStore, webhook_id
from wayline.delivery.transports.base import Failure, FailureKind, Response


def pending(event: str) -> Pending:
    return Pending.single(event, b"{}", subscription_id="sub_m", endpoint_id="ep_m", now=datetime.now(UTC))


def test_the_store_keeps_the_first_state_per_webhook_id_like_on_conflict_do_nothing() -> None:
    store, now, chance = MemoryStore(), datetime.now(UTC), random.Random(1)
    first = settle(pending("e-1"), Failure(FailureKind.TIMEOUT, "slow"), now, chance)
    later = settle(pending("e-1"), Response(200, {}, b"", 0.0), now, chance)
    store.record([first])
    store.record([later, settle(pending("e-2"), Response(200, {}, b"", 0.0), now, chance)])
    assert store.screen([webhook_id(first), webhook_id(later), "msg_other"], (), ()).settled == {webhook_id(first)}
    assert store.states[webhook_id(first)] is first
    assert len(store.states) == 2
