"""Idempotent creates: a repeated request with the same `Idempotency-Key` gets the first
answer back instead of creating a second object; the same key with a different body is
a conflict. Keys are per API key, so two callers cannot collide.

A record keeps no secret: the fields of an answer that carry one (an API key, an
endpoint's signing secret) are left out of it, so a replay answers without them (header
`Idempotent-Replayed: true`). The request is compared by an HMAC of the whole body,
secret fields included, so a repeat that changes only a password is still a conflict,
and the record reveals no password either. Records expire after `api.idempotency_ttl_s`
(24 h); each create purges a bounded number of expired ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, SecretStr
from sqlalchemy import delete, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict
from wayline.registry.access import Caller
from wayline.registry.db import Database
from wayline.registry.models import IdempotentResponse
from wayline.registry.secrets import SecretBox

# Expired records deleted per create: enough to keep up with any create rate, never a long delete.
PURGE_BATCH = 100


def _reveal(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value)


def _fingerprint(box: SecretBox, body: BaseModel) -> str:
    plain = body.model_dump(mode="python")  # SecretStr stays an object here, so _reveal sees it
    return box.fingerprint(orjson.dumps(plain, default=_reveal, option=orjson.OPT_SORT_KEYS))


def _replay(stored: IdempotentResponse, fingerprint: str) -> JSONResponse:
    if stored.request_hash != fingerprint:
        raise Conflict("this Idempotency-Key was used with a different request body")
    return JSONResponse(stored.body, stored.status_code, headers={"Idempotent-Replayed": "true"})


def _live(session: Session, caller: Caller, key: str, cutoff: datetime) -> IdempotentResponse | None:
    stored = session.get(IdempotentResponse, (caller.key_id, key))
    if stored is not None and stored.created_at < cutoff:
        session.delete(stored)
        session.flush()
        return None
    return stored


def _purge(session: Session, cutoff: datetime) -> None:
    expired = select(IdempotentResponse.api_key_id, IdempotentResponse.key).where(
        IdempotentResponse.created_at < cutoff).limit(PURGE_BATCH).with_for_update(skip_locked=True)
    session.execute(delete(IdempotentResponse).where(
        tuple_(IdempotentResponse.api_key_id, IdempotentResponse.key).in_(expired)))


def create_once(
    db: Database, caller: Caller, key: str | None, body: BaseModel, create: Callable[[Session], Any],
    *, box: SecretBox, ttl: timedelta, secret_fields: Iterable[str] = (), status: int = 201,
) -> JSONResponse:
    """Run ``create`` once per ``key``; ``secret_fields`` of its answer are never stored."""
    if key is None:
        with db.transaction() as session:
            return JSONResponse(jsonable_encoder(create(session)), status)
    fingerprint = _fingerprint(box, body)
    cutoff = datetime.now(timezone.utc) - ttl
    try:
        with db.transaction() as session:
            _purge(session, cutoff)
            stored = _live(session, caller, key, cutoff)
            if stored is not None:
                return _replay(stored, fingerprint)
            answer = jsonable_encoder(create(session))
            withheld = set(secret_fields)
            record = {name: value for name, value in answer.items() if name not in withheld}
            session.add(IdempotentResponse(
                api_key_id=caller.key_id, key=key, request_hash=fingerprint, status_code=status, body=record,
            ))
        return JSONResponse(answer, status)
    except IntegrityError:
        # A concurrent request with the same key won the insert; answer as it did.
        with db.transaction() as session:
            stored = _live(session, caller, key, cutoff)
            if stored is None:
                raise
            return _replay(stored, fingerprint)


__all__ = ["PURGE_BATCH", "create_once"]
