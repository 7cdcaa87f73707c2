"""Who may publish to or poll which topic: admin keys everything, customer keys what a grant names.

A grant gives one API key actions (`publish`, `poll`) on the topics matching a glob pattern
(`orders.*`). Reserved topics (`wayline.core.topics`) are out of every grant's reach: no key
publishes to them, and only admin keys poll them; a grant whose pattern can match nothing
else is refused. A key and its grants are read together and kept `messaging.auth_cache_s`
(2 s): a publish at 200 requests/s must not cost a database round trip each, so a
revoked key or a changed grant takes effect on every instance within that time.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from wayline.core.errors import Forbidden, NotFound, RejectedInput
from wayline.core.topics import ReservedTopics
from wayline.messaging.models import TopicGrant
from wayline.messaging.wire import GrantOut
from wayline.registry import api_key
from wayline.registry.access import Caller
from wayline.registry.db import Database
from wayline.registry.ids import new_id
from wayline.registry.models import ApiKey
from wayline.registry.secrets import hash_api_key

# Remembered keys per instance; past this the memory is emptied (keys are few, this bounds a flood).
MAX_REMEMBERED = 10_000

Action = Literal["publish", "poll"]


class GrantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    api_key_id: str
    pattern: str = Field(min_length=1, max_length=249, description="a topic name or glob: `orders.*`")
    actions: list[Action] = Field(min_length=1)


@dataclass(frozen=True)
class Permissions:
    caller: Caller
    grants: tuple[tuple[str, frozenset[str]], ...]  # (pattern, actions)
    reserved: ReservedTopics

    def require(self, action: Action, topic: str) -> None:
        if action == "publish" or not self.caller.is_admin:
            self.reserved.refuse(topic, action)
        if self.caller.is_admin:
            return
        if not any(action in actions and fnmatch.fnmatchcase(topic, pattern) for pattern, actions in self.grants):
            raise Forbidden(f"this API key may not {action} topic {topic}: an admin grants it with POST /topic-grants")

    def require_any(self, action: Action, doing: str) -> None:
        """Some grant allows ``action``: for ``doing`` what names no topic yet (a transaction's begin)."""
        if not self.caller.is_admin and not any(action in actions for _, actions in self.grants):
            raise Forbidden(f"this API key may not {action} any topic, so it may not {doing}: an admin grants it "
                            "with POST /topic-grants")


def authorize(session: Session, presented: str, reserved: ReservedTopics) -> Permissions:
    caller = api_key.authenticate(session, presented)
    rows = session.execute(
        select(TopicGrant.pattern, TopicGrant.actions).where(TopicGrant.api_key_id == caller.key_id)
    ).all()
    return Permissions(caller, tuple((pattern, frozenset(actions)) for pattern, actions in rows), reserved)


class Authorizer:
    """`authorize`, remembered per presented key for `max_age_s`; refusals are never remembered."""

    def __init__(self, database: Database, max_age_s: float, reserved: ReservedTopics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._database = database
        self._max_age_s = max_age_s
        self._reserved = reserved
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, Permissions]] = {}

    def remembered(self, presented: str) -> Permissions | None:
        hit = self._known.get(hash_api_key(presented))
        return hit[1] if hit is not None and self._clock() - hit[0] < self._max_age_s else None

    def permissions(self, presented: str) -> Permissions:
        known = self.remembered(presented)
        if known is not None:
            return known
        with self._database.transaction() as session:
            permissions = authorize(session, presented, self._reserved)
        with self._lock:
            if len(self._known) >= MAX_REMEMBERED:
                self._known.clear()
            self._known[hash_api_key(presented)] = (self._clock(), permissions)
        return permissions


def create_grant(session: Session, caller: Caller, body: GrantIn, reserved: ReservedTopics) -> GrantOut:
    caller.require_admin()
    reason = reserved.pattern_reason(body.pattern)
    if reason is not None:
        raise RejectedInput(f"pattern: {body.pattern} matches reserved topics only: {reason}; a grant cannot give them")
    if session.get(ApiKey, body.api_key_id) is None:
        raise NotFound(f"api key {body.api_key_id} not found")
    row = TopicGrant(id=new_id("topic_grant"), api_key_id=body.api_key_id, pattern=body.pattern,
                     actions=sorted(set(body.actions)))
    session.add(row)
    session.flush()
    session.refresh(row)
    return GrantOut.model_validate(row)


def list_grants(session: Session, caller: Caller, api_key_id: str | None) -> list[GrantOut]:
    caller.require_admin()
    query = select(TopicGrant).order_by(TopicGrant.id)
    if api_key_id is not None:
        query = query.where(TopicGrant.api_key_id == api_key_id)
    return [GrantOut.model_validate(row) for row in session.scalars(query)]


def delete_grant(session: Session, caller: Caller, grant_id: str) -> None:
    caller.require_admin()
    row = session.get(TopicGrant, grant_id)
    if row is None:
        raise NotFound(f"topic grant {grant_id} not found")
    session.delete(row)


__all__ = [
    "Action", "Authorizer", "GrantIn", "Permissions", "authorize", "create_grant", "delete_grant",
    "list_grants",
]
