"""Rules in the registry: SQL rules and MATCH_RECOGNIZE patterns the rules job runs.

A rule is checked and compiled when it is submitted (``wayline.rules.rule.compile_rule``);
one that does not compile is refused here with the compiler's message and never reaches
the job. Rules are platform objects: every operation needs an admin key.

Status: ``running`` (enabled), ``stopped`` (disabled) or ``quarantined`` (the job stopped
it: it raised, or exceeded its time or state budget; ``error`` says which). A change to the
definition (SQL, partition key) bumps ``revision``, which gives the rule fresh state in the
job. Enabling a quarantined rule, or changing its definition, sets it running again, also
with a new revision: the state it failed with is not reused.

Every change bumps the rules version (a trigger on the table), which the job polls.

Alerts: a rule whose ``output_topic`` is under ``kafka.alert_topic_prefix`` has its output
read by the delivery job, and its ``output_type`` enters the event-type catalog when the rule
is created or its output changes; customers then subscribe to it like to any event type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict, NotFound, RejectedInput
from wayline.core.settings import Settings
from wayline.core.topics import ReservedTopics
from wayline.registry import catalog, reference
from wayline.registry.access import Caller, Page, page
from wayline.registry.ids import new_id
from wayline.registry.models import Rule, RulesVersion
from wayline.rules.columns import key_name, parse_key
from wayline.rules.rule import CompiledRule, compile_rule
from wayline.rules.window import WindowKind

Status = Literal["running", "stopped", "quarantined"]
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="unique; letters, digits, . _ -")
    sql: str = Field(min_length=1, max_length=20_000)
    partition_key: list[str] | None = Field(
        default=None, max_length=10, description="columns, e.g. ['tenantid'] or ['data.user']; stated by the SQL for stateful rules"
    )
    output_topic: str = Field(pattern=TOPIC_PATTERN)
    output_type: str = Field(min_length=1, max_length=200, description="the CloudEvents type of the rule's output")
    state_budget: int | None = Field(default=None, ge=1, le=100_000_000, description="state entries per partition key")
    time_budget_ms: int | None = Field(default=None, ge=1, le=600_000, description="evaluation time per micro-batch")
    enabled: bool = True


class RulePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sql: str | None = Field(default=None, min_length=1, max_length=20_000)
    partition_key: list[str] | None = Field(default=None, max_length=10)
    output_topic: str | None = Field(default=None, pattern=TOPIC_PATTERN)
    output_type: str | None = Field(default=None, min_length=1, max_length=200)
    state_budget: int | None = Field(default=None, ge=1, le=100_000_000)
    time_budget_ms: int | None = Field(default=None, ge=1, le=600_000)
    enabled: bool | None = None


class RuleOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    name: str
    sql: str
    kind: str
    partition_key: list[str]
    output_topic: str
    output_type: str
    state_budget: int
    time_budget_ms: int
    enabled: bool
    status: Status
    error: str | None
    quarantines: int
    revision: int
    created_at: datetime
    updated_at: datetime
    warnings: list[str] = Field(
        default_factory=list,
        description="when the rule is created or its SQL changes: what it will do that the submitter may not expect "
                    "(e.g. data.* paths compared with each other compare as text)",
    )


@dataclass(frozen=True)
class RulePolicy:
    """What the deployment allows a rule, from the settings: budgets, window fan-out, topics."""

    state_budget: int
    time_budget_ms: int
    max_windows_per_event: int
    # Wayline's own topics: a rule writing there would forge work, operations events, audit records or rules.
    reserved: ReservedTopics
    # The event topics the rules job reads: a rule writing there would read its own output back.
    event_prefix: str
    # Output topics the delivery job reads: their rules' output types enter the catalog.
    alert_prefix: str

    @classmethod
    def from_settings(cls, settings: Settings) -> RulePolicy:
        return cls(
            state_budget=settings.rules.default_state_budget,
            time_budget_ms=settings.rules.default_time_budget_ms,
            max_windows_per_event=settings.rules.max_windows_per_event,
            reserved=ReservedTopics.from_settings(settings),
            event_prefix=settings.kafka.event_topic_prefix,
            alert_prefix=settings.kafka.alert_topic_prefix,
        )

    def check_topic(self, topic: str) -> None:
        self.reserved.refuse_field("output_topic", topic)
        if topic.startswith(self.event_prefix):
            raise RejectedInput(
                f"output_topic: {topic} is one of the event topics ({self.event_prefix}*), which the rules job reads: "
                f"it would read the rule's output back; choose another ({self.alert_prefix}* is delivered to "
                "subscribers)"
            )

    def publish(self, session: Session, row: Rule) -> None:
        """A rule writing to an alert topic has its output delivered to subscribers: its
        output type enters the catalog (if new), so customers can subscribe to it."""
        if not row.output_topic.startswith(self.alert_prefix):
            return
        if row.output_type in catalog.OPERATIONAL_EVENT_TYPES:
            raise RejectedInput(f"output_type: {row.output_type} is one of Wayline's own event types; choose another")
        if re.fullmatch(catalog.NAME_PATTERN, row.output_type) is None:
            raise RejectedInput(
                f"output_type: {row.output_type!r} is not an event type name (up to 200 letters, digits and "
                f". _ : / -, starting with a letter or digit), which a rule writing to {self.alert_prefix}* needs: "
                "its output is delivered to subscribers of that type"
            )
        catalog.enter_event_type(session, row.output_type, f"the output of rule {row.name}")

    def compile(self, sql: str, partition_key: list[str] | None) -> CompiledRule:
        """The submit-time check: the rule compiles, and its windows stay within the fan-out limit."""
        compiled = compile_definition(sql, partition_key)
        window = compiled.window
        if window is not None and window.kind is WindowKind.FIXED:
            fan_out = window.size // window.slide
            if fan_out > self.max_windows_per_event:
                raise RejectedInput(
                    f"window(...): a window of {window.size} sliding by {window.slide} puts each event into "
                    f"{fan_out:,} windows; at most {self.max_windows_per_event:,} windows per event "
                    "(rules.max_windows_per_event): slide by more"
                )
        return compiled


def _check_reference(session: Session, compiled: CompiledRule) -> None:
    """A join rule's reference table must exist when the rule is submitted."""
    table = compiled.join.table if compiled.join is not None else None
    if table is not None and not reference.exists(session, table):
        raise RejectedInput(
            f"JOIN reference.{table}: there is no reference table {table}; create it first (POST /reference-tables)"
        )


def compile_definition(sql: str, partition_key: list[str] | None) -> CompiledRule:
    """Check and compile a rule's SQL and partition key (the job recompiles stored rules with it)."""
    key = tuple(parse_key(text) for text in partition_key) if partition_key is not None else None
    return compile_rule(sql, key)


def create(session: Session, caller: Caller, body: RuleIn, policy: RulePolicy) -> RuleOut:
    caller.require_admin()
    compiled = policy.compile(body.sql, body.partition_key)
    _check_reference(session, compiled)
    policy.check_topic(body.output_topic)
    if session.scalar(select(Rule.id).where(Rule.name == body.name)) is not None:
        raise Conflict(f"name: a rule named {body.name} exists already")
    row = Rule(
        id=new_id("rule"), name=body.name, sql=body.sql, kind=compiled.kind.value,
        partition_key=[key_name(path) for path in compiled.partition_key],
        output_topic=body.output_topic, output_type=body.output_type,
        state_budget=body.state_budget or policy.state_budget,
        time_budget_ms=body.time_budget_ms or policy.time_budget_ms,
        enabled=body.enabled, status="running" if body.enabled else "stopped", quarantines=0, revision=1,
    )
    policy.publish(session, row)
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"name: a rule named {body.name} exists already") from exc
    session.refresh(row)
    return RuleOut.model_validate(row).model_copy(update={"warnings": list(compiled.warnings)})


def get(session: Session, caller: Caller, rule_id: str) -> RuleOut:
    caller.require_admin()
    return RuleOut.model_validate(_row(session, rule_id))


def list_(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int,
          status: Status | None = None) -> Page[RuleOut]:
    caller.require_admin()
    query = select(Rule)
    if status is not None:
        query = query.where(Rule.status == status)
    rows, next_cursor = page(session, query, Rule.id, cursor, limit, max_limit)
    return Page[RuleOut](data=[RuleOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def update(session: Session, caller: Caller, rule_id: str, body: RulePatch, policy: RulePolicy) -> RuleOut:
    caller.require_admin()
    row = _row(session, rule_id)
    changes = body.model_dump(exclude_unset=True)
    for name in ("sql", "output_topic", "output_type", "state_budget", "time_budget_ms", "enabled"):
        if name in changes and changes[name] is None:
            raise RejectedInput(f"{name}: may not be null")
    restart = False
    warnings: list[str] = []
    if "sql" in changes or "partition_key" in changes:
        sql = changes.get("sql", row.sql)
        # A partition key left out of the change follows the (possibly new) SQL.
        compiled = policy.compile(sql, changes.get("partition_key"))
        _check_reference(session, compiled)
        warnings = list(compiled.warnings)
        new_key = [key_name(path) for path in compiled.partition_key]
        if sql != row.sql or new_key != list(row.partition_key) or compiled.kind.value != row.kind:
            row.sql, row.kind, row.partition_key = sql, compiled.kind.value, new_key
            restart = True
    if "output_topic" in changes:
        policy.check_topic(changes["output_topic"])
    for name in ("output_topic", "output_type", "state_budget", "time_budget_ms"):
        if name in changes:
            setattr(row, name, changes[name])
    if "output_topic" in changes or "output_type" in changes:
        policy.publish(session, row)
    if "enabled" in changes:
        if changes["enabled"] and row.status != "running":
            restart = True
        row.enabled = changes["enabled"]
    if restart:
        row.revision += 1
    if not row.enabled:
        row.status = "stopped"
    elif restart or row.status == "stopped":
        row.status, row.error = "running", None
    row.updated_at = datetime.now(timezone.utc)
    session.flush()
    return RuleOut.model_validate(row).model_copy(update={"warnings": warnings})


def delete(session: Session, caller: Caller, rule_id: str) -> None:
    caller.require_admin()
    session.delete(_row(session, rule_id))


def quarantine(session: Session, rule_id: str, revision: int, error: str) -> bool:
    """Stop a rule the job found failing; a no-op (False) if it was changed since that revision."""
    result = session.execute(
        sql_update(Rule)
        .where(Rule.id == rule_id, Rule.revision == revision, Rule.status == "running")
        .values(status="quarantined", error=error[:4000], quarantines=Rule.quarantines + 1,
                updated_at=datetime.now(timezone.utc))
    )
    return bool(result.rowcount)


def running(session: Session) -> list[Rule]:
    """The rules the job should run: enabled and not quarantined."""
    return list(session.scalars(select(Rule).where(Rule.enabled.is_(True), Rule.status == "running").order_by(Rule.id)))


def rules_version(session: Session) -> int:
    return int(session.scalar(select(RulesVersion.version).where(RulesVersion.id == 1)) or 0)


def upsert(session: Session, caller: Caller, body: RuleIn, policy: RulePolicy) -> RuleOut:
    """Create the rule named ``body.name``, or change it to match ``body`` (the control topic)."""
    existing = session.scalar(select(Rule).where(Rule.name == body.name))
    if existing is None:
        return create(session, caller, body, policy)
    patch = RulePatch(
        sql=body.sql, partition_key=body.partition_key, output_topic=body.output_topic,
        output_type=body.output_type, state_budget=body.state_budget or existing.state_budget,
        time_budget_ms=body.time_budget_ms or existing.time_budget_ms, enabled=body.enabled,
    )
    fields = set(RulePatch.model_fields) - ({"partition_key"} if body.partition_key is None else set())
    return update(session, caller, existing.id, RulePatch(**patch.model_dump(include=fields)), policy)


def delete_by_name(session: Session, caller: Caller, name: str) -> bool:
    caller.require_admin()
    row = session.scalar(select(Rule).where(Rule.name == name))
    if row is None:
        return False
    session.delete(row)
    return True


def _row(session: Session, rule_id: str) -> Rule:
    row = session.get(Rule, rule_id)
    if row is None:
        raise NotFound(f"rule {rule_id} not found")
    return row


__all__ = [
    "RuleIn", "RuleOut", "RulePatch", "RulePolicy", "compile_definition", "create", "delete",
    "delete_by_name", "get", "list_", "quarantine", "rules_version", "running", "update", "upsert",
]
