"""Reference tables: keyed JSON rows that join rules look events up in.

A table is a name and rows of (``key``, ``data``): the key a string, the data a JSON object,
as a rule reads them (``r.key``, ``r.data.tier``). Rows are put (inserted or replaced) in
bulk and deleted by key through the admin API. Every change bumps the table's ``version``;
the rules job polls the versions of the tables its join rules read and reloads a table that
moved, so a change reaches running rules within ``rules.version_poll_s`` and a micro-batch
(``wayline.pipelines.joins``), without a restart. Platform objects: admin keys only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from wayline.core.errors import Conflict, NotFound
from wayline.registry.access import Caller, Page, page
from wayline.registry.models import ReferenceRow, ReferenceTable, Rule
from wayline.rules.rule import compile_rule

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,99}$"  # a SQL identifier: rules name it as reference.<name>
MAX_ROWS_PER_PUT = 10_000


class ReferenceTableIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, description="letters, digits and _; rules read reference.<name>")
    description: str = Field(default="", max_length=2000)


class ReferenceTableOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    name: str
    description: str
    version: int
    created_at: datetime
    updated_at: datetime


class ReferenceRowIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=1000)
    data: dict[str, Any]


class ReferenceRowOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    key: str
    data: dict[str, Any]


def create_table(session: Session, caller: Caller, body: ReferenceTableIn) -> ReferenceTableOut:
    caller.require_admin()
    if session.get(ReferenceTable, body.name) is not None:
        raise Conflict(f"name: a reference table named {body.name} exists already")
    row = ReferenceTable(name=body.name, description=body.description, version=1)
    session.add(row)
    session.flush()
    session.refresh(row)
    return ReferenceTableOut.model_validate(row)


def get_table(session: Session, caller: Caller, name: str) -> ReferenceTableOut:
    caller.require_admin()
    return ReferenceTableOut.model_validate(_table(session, name))


def list_tables(session: Session, caller: Caller, cursor: str | None, limit: int, max_limit: int
                ) -> Page[ReferenceTableOut]:
    caller.require_admin()
    rows, next_cursor = page(session, select(ReferenceTable), ReferenceTable.name, cursor, limit, max_limit)
    return Page[ReferenceTableOut](data=[ReferenceTableOut.model_validate(r) for r in rows], next_cursor=next_cursor)


def delete_table(session: Session, caller: Caller, name: str) -> None:
    """Refused while a rule reads the table: that rule would fail in the job."""
    caller.require_admin()
    table = _table(session, name)
    readers = sorted(rule.name for rule in session.scalars(select(Rule).where(Rule.kind == "join"))
                     if reads(rule.sql) == name)
    if readers:
        raise Conflict(f"reference table {name} is read by rule(s) {', '.join(readers)}; change or delete them first")
    session.delete(table)


def put_rows(session: Session, caller: Caller, name: str, rows: list[ReferenceRowIn]) -> int:
    """Insert or replace rows by key; the table's version moves once."""
    caller.require_admin()
    _table(session, name)
    if rows:
        latest = {row.key: row.data for row in rows}  # the last of a repeated key wins
        statement = insert(ReferenceRow).values([{"table_name": name, "key": k, "data": d} for k, d in latest.items()])
        session.execute(statement.on_conflict_do_update(
            index_elements=[ReferenceRow.table_name, ReferenceRow.key], set_={"data": statement.excluded.data}))
        _bump(session, name)
    return len(rows)


def get_row(session: Session, caller: Caller, name: str, key: str) -> ReferenceRowOut:
    caller.require_admin()
    row = session.get(ReferenceRow, (name, key))
    if row is None:
        _table(session, name)
        raise NotFound(f"reference table {name} has no row with key {key}")
    return ReferenceRowOut.model_validate(row)


def delete_row(session: Session, caller: Caller, name: str, key: str) -> None:
    caller.require_admin()
    _table(session, name)
    if not session.execute(delete(ReferenceRow).where(ReferenceRow.table_name == name, ReferenceRow.key == key)).rowcount:
        raise NotFound(f"reference table {name} has no row with key {key}")
    _bump(session, name)


def versions(session: Session, names: list[str]) -> dict[str, int]:
    """The current version of each named table that exists (the rules job polls these)."""
    rows = session.execute(select(ReferenceTable.name, ReferenceTable.version).where(ReferenceTable.name.in_(names)))
    return {name: version for name, version in rows}


def exists(session: Session, name: str) -> bool:
    return session.get(ReferenceTable, name) is not None


def reads(sql: str) -> str | None:
    """The reference table a stored join rule reads (None for an interval join)."""
    join = compile_rule(sql).join
    return join.table if join is not None else None


def _table(session: Session, name: str) -> ReferenceTable:
    row = session.get(ReferenceTable, name)
    if row is None:
        raise NotFound(f"reference table {name} not found")
    return row


def _bump(session: Session, name: str) -> None:
    session.execute(update(ReferenceTable).where(ReferenceTable.name == name).values(
        version=ReferenceTable.version + 1, updated_at=datetime.now(timezone.utc)))


__all__ = [
    "MAX_ROWS_PER_PUT", "ReferenceRowIn", "ReferenceRowOut", "ReferenceTableIn", "ReferenceTableOut", "create_table",
    "delete_row", "delete_table", "exists", "reads", "get_row", "get_table", "list_tables", "put_rows", "versions",
]
