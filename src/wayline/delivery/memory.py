"""A delivery store in memory: with the in-memory transport (``transports.memory``), what sits
above them (the dispatcher, the stage, retry and circuit logic) can be unit-tested on plain
values. Integration tests keep PostgreSQL and the HTTP transports.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from wayline.delivery.attempt import Gone, State, Succeeded, WillRetry
from wayline.delivery.stage import Blocked, Screening


class MemoryStore:
    """The stage's store in memory: the first state recorded per ``webhook-id`` wins, as the
    PostgreSQL store's ``ON CONFLICT DO NOTHING`` writes do."""

    def __init__(self) -> None:
        self.states: dict[str, State] = {}
        self.gone: set[str] = set()
        """Subscriptions whose endpoint answered 410, as the PostgreSQL store marks them."""
        self.throttled: dict[str, datetime] = {}
        """Endpoints paused until then; a test sets them."""

    def screen(self, webhook_ids: Collection[str], subscription_ids: Collection[str],
               endpoint_ids: Collection[str]) -> Screening:
        return Screening(
            frozenset(webhook_id for webhook_id in webhook_ids if webhook_id in self.states),
            Blocked(frozenset(self.gone.intersection(subscription_ids)),
                    {endpoint: until for endpoint, until in self.throttled.items() if endpoint in endpoint_ids}))

    def record(self, states: Sequence[State]) -> None:
        for state in states:
            self.states.setdefault(webhook_id(state), state)
            if isinstance(state, Gone):
                self.gone.add(state.failed.subscription_id)


def webhook_id(state: State) -> str:
    if isinstance(state, Succeeded):
        return state.delivered.webhook_id
    if isinstance(state, WillRetry):
        return state.next.webhook_id
    return state.failed.webhook_id


__all__ = ["MemoryStore", "webhook_id"]
