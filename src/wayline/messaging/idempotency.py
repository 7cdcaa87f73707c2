"""Publish with an `Idempotency-Key`: a retried request gets the first answer and writes nothing.

The key is claimed in the database *before* anything is written, so two concurrent requests
with one key cannot both write: the second is told the first is still in progress (409).
If the instance holding a claim dies before answering, the claim lapses after
`messaging.idempotency_pending_s` and a retry writes again (its records may then be in
the topic twice: the one case where a retry can duplicate, and only after a crash).

As in Stripe's rule, a request is its parameters, not its bytes: the body is compared as
canonical JSON (keys sorted, no spacing), so the same events with their keys in another
order are the same request. And a request refused before it had any effect (every event
refused by validation) releases its claim: the key is not used up, a corrected request
may take it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert

from wayline.core.errors import Conflict
from wayline.messaging.models import PublishRequest
from wayline.registry.db import Database


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


def fingerprint(topic: str, body: Any) -> str:
    """The request's identity: its topic and its decoded body as canonical JSON."""
    return hashlib.sha256(topic.encode() + b"\0" + orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class PublishLedger:
    def __init__(self, database: Database, pending_s: float) -> None:
        self._database = database
        self._pending = timedelta(seconds=pending_s)

    def claim(self, key_id: str, key: str, request_hash: str) -> Answer | None:
        """None: this request owns the key and writes; otherwise the first request's answer."""
        with self._database.transaction() as session:
            claimed = session.execute(
                insert(PublishRequest).values(api_key_id=key_id, key=key, request_hash=request_hash)
                .on_conflict_do_nothing().returning(PublishRequest.key)
            ).first()
            if claimed is not None:
                return None
            row = session.execute(
                select(PublishRequest).where(PublishRequest.api_key_id == key_id, PublishRequest.key == key)
                .with_for_update()
            ).scalar_one()
            if row.request_hash != request_hash:
                raise Conflict("this Idempotency-Key was used with a different topic or body")
            if row.status_code is not None:
                return Answer(row.status_code, row.body)
            if row.claimed_at > datetime.now(timezone.utc) - self._pending:
                raise Conflict("a request with this Idempotency-Key is still being written: retry after it answers")
            row.claimed_at = func.now()
            return None

    def settle(self, key_id: str, key: str, answer: Answer) -> None:
        with self._database.transaction() as session:
            row = session.get(PublishRequest, (key_id, key))
            if row is not None:
                row.status_code, row.body = answer.status, answer.body

    def release(self, key_id: str, key: str) -> None:
        """The request wrote nothing (it failed, or was refused): a retry may go ahead at once."""
        with self._database.transaction() as session:
            session.execute(
                delete(PublishRequest).where(PublishRequest.api_key_id == key_id, PublishRequest.key == key)
            )


__all__ = ["Answer", "PublishLedger", "fingerprint"]
