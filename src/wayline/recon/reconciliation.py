"""Reconciliations in the registry: which stream is expected, which is actual, and the periods.

A reconciliation names an *expected* side (an audit or inventory topic, role
``producer-expected`` or ``consumer-expected``) and an *actual* side (event topics, role
``actual``), each by topic names or one pattern, and how to read a record's id, source and
event time: a CloudEvents attribute (structured, or ``ce_*`` headers in binary mode) by
default, or a ``data.*`` path. A record a side cannot read (not an event; no id, or no
RFC 3339 time, where the side reads them) is counted ``unreadable`` and quarantined
(:class:`Unreadable`; README, "Reconciliation"). Periods ``o``, ``n``, ``m``, ``z`` are
seconds or ISO 8601 durations (``wayline.recon.periods`` says what each means). Every
operation needs an admin key. A change bumps ``revision`` and the recon version (a
trigger), which the job polls. The output topic is ``recon.output_topic`` unless named;
a named one may not be reserved (``wayline.core.topics``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict, NotFound, RejectedInput
from wayline.core.settings import Settings
from wayline.core.topics import ReservedTopics
from wayline.recon.periods import Periods
from wayline.registry.access import Caller, Page, page
from wayline.registry.ids import new_id
from wayline.registry.models import Reconciliation, ReconVersion

Role = Literal["producer-expected", "consumer-expected", "actual"]
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# What a field may be read from: a CloudEvents attribute, or a path into the event's data.
ATTRIBUTES = ("id", "source", "subject", "type", "time", "tenantid", "subtenantid")
DATA_PATH = re.compile(r"^data(\.[A-Za-z_][A-Za-z0-9_]*){1,10}$")


class Unreadable(StrEnum):
    """Why a reconciliation cannot use an event on a side's topics: its quarantine reason (a
    record that is not an event keeps the envelope's)."""

    MISSING_ID = "recon_missing_id"  # nothing, or an empty string, where the side reads the id
    BAD_TIME = "recon_bad_time"  # no RFC 3339 date-time where the side reads the time


class SideIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    topics: list[str] = Field(default_factory=list, max_length=100)
    pattern: str | None = Field(default=None, min_length=1, max_length=500, description="a regex over topic names")
    id: str = Field(default="id", description="a CloudEvents attribute, or a data.* path")
    source: str = Field(default="source", description="a CloudEvents attribute, or a data.* path")
    time: str = Field(default="time", description="a CloudEvents attribute, or a data.* path (an ISO 8601 time)")

    @field_validator("topics")
    @classmethod
    def _topics(cls, topics: list[str]) -> list[str]:
        for topic in topics:
            if not re.fullmatch(TOPIC_PATTERN, topic):
                raise ValueError(f"{topic!r} is not a Kafka topic name")
        return topics

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return pattern

    @field_validator("id", "source", "time")
    @classmethod
    def _field(cls, where: str) -> str:
        if where not in ATTRIBUTES and not DATA_PATH.fullmatch(where):
            raise ValueError(f"{where!r}: name a CloudEvents attribute ({', '.join(ATTRIBUTES)}) or a data.* path")
        return where

    @model_validator(mode="after")
    def _one_selection(self) -> SideIn:
        if bool(self.topics) == (self.pattern is not None):
            raise ValueError("name the topics, or give a pattern, not both")
        return self


class PeriodsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    o: timedelta = Field(description="metrics interval")
    n: timedelta = Field(description="missing after; also the out-of-orderness allowed")
    m: timedelta = Field(description="correction window; also how long state is kept")
    z: timedelta = Field(description="processing time a stalled watermark waits before moving on")

    def checked(self) -> Periods:
        return Periods(*(int(getattr(self, name) / timedelta(milliseconds=1)) for name in "onmz"))


class ReconciliationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="unique; letters, digits, . _ -")
    expected: SideIn
    actual: SideIn
    periods: PeriodsIn
    output_topic: str | None = Field(default=None, pattern=TOPIC_PATTERN,
                                     description="missing, found and metrics events; default: recon.output_topic")
    enabled: bool = True


class ReconciliationPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected: SideIn | None = None
    actual: SideIn | None = None
    periods: PeriodsIn | None = None
    output_topic: str | None = Field(default=None, pattern=TOPIC_PATTERN)
    enabled: bool | None = None


class PeriodsOut(BaseModel):
    o: float
    n: float
    m: float
    z: float


class ReconciliationOut(BaseModel):
    id: str
    name: str
    expected: SideIn
    actual: SideIn
    periods: PeriodsOut  # seconds
    output_topic: str
    enabled: bool
    revision: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Reconciliation) -> ReconciliationOut:
        return cls(
            id=row.id, name=row.name, expected=SideIn.model_validate(row.expected),
            actual=SideIn.model_validate(row.actual),
            periods=PeriodsOut(o=row.o_ms / 1000, n=row.n_ms / 1000, m=row.m_ms / 1000, z=row.z_ms / 1000),
            output_topic=row.output_topic, enabled=row.enabled, revision=row.revision,
            created_at=row.created_at, updated_at=row.updated_at,
        )


@dataclass(frozen=True)
class OutputTopics:
    """Where reconciliations write: the default topic, or one named that is not reserved."""

    default: str
    reserved: ReservedTopics

    @classmethod
    def from_settings(cls, settings: Settings) -> OutputTopics:
        return cls(settings.recon.output_topic, ReservedTopics.from_settings(settings))

    def checked(self, topic: str | None) -> str:
        # Naming the default is leaving it unset: the recon job writes there in any case.
        if topic is None or topic == self.default:
            return self.default
        self.reserved.refuse_field("output_topic", topic)
        return topic


def periods_of(row: Reconciliation) -> Periods:
    return Periods(o=row.o_ms, n=row.n_ms, m=row.m_ms, z=row.z_ms)


def _check_roles(expected: SideIn, actual: SideIn) -> None:
    if expected.role == "actual":
        raise RejectedInput("expected.role: producer-expected or consumer-expected")
    if actual.role != "actual":
        raise RejectedInput("actual.role: must be actual")


def _set_periods(row: Reconciliation, periods: Periods) -> None:
    row.o_ms, row.n_ms, row.m_ms, row.z_ms = periods.o, periods.n, periods.m, periods.z


def create(session: Session, caller: Caller, body: ReconciliationIn, outputs: OutputTopics) -> ReconciliationOut:
    caller.require_admin()
    _check_roles(body.expected, body.actual)
    periods = body.periods.checked()
    output_topic = outputs.checked(body.output_topic)
    if session.scalar(select(Reconciliation.id).where(Reconciliation.name == body.name)) is not None:
        raise Conflict(f"name: a reconciliation named {body.name} exists already")
    row = Reconciliation(
        id=new_id("reconciliation"), name=body.name, expected=body.expected.model_dump(),
        actual=body.actual.model_dump(), output_topic=output_topic,
        enabled=body.enabled, revision=1,
    )
    _set_periods(row, periods)
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"name: a reconciliation named {body.name} exists already") from exc
    session.refresh(row)
    return ReconciliationOut.of(row)


def get(session: Session, caller: Caller, reconciliation_id: str) -> ReconciliationOut:
    caller.require_admin()
    return ReconciliationOut.of(row_of(session, reconciliation_id))


def list_(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int) -> Page[ReconciliationOut]:
    caller.require_admin()
    rows, next_cursor = page(session, select(Reconciliation), Reconciliation.id, cursor, limit, max_limit)
    return Page[ReconciliationOut](data=[ReconciliationOut.of(r) for r in rows], next_cursor=next_cursor)


def update(session: Session, caller: Caller, reconciliation_id: str, body: ReconciliationPatch,
           outputs: OutputTopics) -> ReconciliationOut:
    caller.require_admin()
    row = row_of(session, reconciliation_id)
    changes = body.model_dump(exclude_unset=True)
    for name, value in changes.items():
        if value is None:
            raise RejectedInput(f"{name}: may not be null")
    expected = body.expected or SideIn.model_validate(row.expected)
    actual = body.actual or SideIn.model_validate(row.actual)
    _check_roles(expected, actual)
    before = (row.expected, row.actual, periods_of(row), row.output_topic, row.enabled)
    row.expected, row.actual = expected.model_dump(), actual.model_dump()
    if body.periods is not None:
        _set_periods(row, body.periods.checked())
    if body.output_topic is not None:
        row.output_topic = outputs.checked(body.output_topic)
    if body.enabled is not None:
        row.enabled = body.enabled
    if (row.expected, row.actual, periods_of(row), row.output_topic, row.enabled) != before:
        row.revision += 1
        row.updated_at = datetime.now(timezone.utc)
    session.flush()
    return ReconciliationOut.of(row)


def delete(session: Session, caller: Caller, reconciliation_id: str) -> None:
    caller.require_admin()
    session.delete(row_of(session, reconciliation_id))


def running(session: Session) -> list[Reconciliation]:
    return list(session.scalars(select(Reconciliation).where(Reconciliation.enabled.is_(True))
                                .order_by(Reconciliation.id)))


def recon_version(session: Session) -> int:
    return int(session.scalar(select(ReconVersion.version).where(ReconVersion.id == 1)) or 0)


def row_of(session: Session, reconciliation_id: str) -> Reconciliation:
    row = session.get(Reconciliation, reconciliation_id)
    if row is None:
        raise NotFound(f"reconciliation {reconciliation_id} not found")
    return row


def side_of(row: Reconciliation, side: str) -> SideIn:
    data: dict[str, Any] = row.expected if side == "expected" else row.actual
    return SideIn.model_validate(data)


__all__ = [
    "ATTRIBUTES", "OutputTopics", "PeriodsIn", "ReconciliationIn", "ReconciliationOut", "ReconciliationPatch", "SideIn",
    "Unreadable", "create", "delete", "get", "list_", "periods_of", "recon_version", "row_of", "running", "side_of",
    "update",
]
