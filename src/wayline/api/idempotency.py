"""Idempotent creates: a repeated request with the same `Idempotency-Key` gets the first
answer back instead of creating a second object; the same key with a different body is
a conflict. Keys are per API key, so two callers cannot collide."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict
from wayline.registry.access import Caller
from wayline.registry.db import Database
from wayline.registry.models import IdempotentResponse


def _fingerprint(body: BaseModel) -> str:
    return hashlib.sha256(orjson.dumps(body.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()


def _replay(stored: IdempotentResponse, fingerprint: str) -> JSONResponse:
    if stored.request_hash != fingerprint:
        raise Conflict("this Idempotency-Key was used with a different request body")
    return JSONResponse(stored.body, stored.status_code, headers={"Idempotent-Replayed": "true"})


def create_once(
    db: Database, caller: Caller, key: str | None, body: BaseModel, create: Callable[[Session], Any], status: int = 201,
) -> JSONResponse:
    if key is None:
        with db.transaction() as session:
            return JSONResponse(jsonable_encoder(create(session)), status)
    fingerprint = _fingerprint(body)
    try:
        with db.transaction() as session:
            stored = session.get(IdempotentResponse, (caller.key_id, key))
            if stored is not None:
                return _replay(stored, fingerprint)
            answer = jsonable_encoder(create(session))
            session.add(IdempotentResponse(
                api_key_id=caller.key_id, key=key, request_hash=fingerprint, status_code=status, body=answer,
            ))
        return JSONResponse(answer, status)
    except IntegrityError:
        # A concurrent request with the same key won the insert; answer as it did.
        with db.transaction() as session:
            stored = session.get(IdempotentResponse, (caller.key_id, key))
            if stored is None:
                raise
            return _replay(stored, fingerprint)


__all__ = ["create_once"]
