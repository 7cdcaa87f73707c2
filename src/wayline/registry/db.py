"""The registry's database: engine, sessions, migrations and the version row."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from psycopg.types.json import set_json_loads
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from wayline.core.errors import ConfigError, RetryLater
from wayline.registry.snapshot import current_version

MIGRATIONS = Path(__file__).with_name("migrations")


def make_engine(dsn: str, *, ping: bool = True) -> Engine:
    """An engine for the PostgreSQL at ``dsn`` (``Settings.postgres_dsn()``), with psycopg 3.

    ``ping``: test each connection as it leaves the pool, so that one the database dropped
    is replaced rather than failing its first statement. A caller that retries a failed
    call anyway (the delivery stages) saves the round trip: SQLAlchemy drops the whole pool
    on the first disconnect it sees, so the retry connects anew."""
    if dsn.startswith("postgresql://"):
        dsn = "postgresql+psycopg://" + dsn.removeprefix("postgresql://")
    engine = create_engine(dsn, pool_size=5, max_overflow=10, pool_pre_ping=ping)

    @event.listens_for(engine, "connect")
    def _fast_json(dbapi_connection: Any, _record: Any) -> None:
        # JSONB columns (filters, sub-tenant pairs) decode faster with orjson, and the snapshot
        # reads one per subscription (see docs/benchmarks.md#registry-snapshot-and-matching-issue-3--2026-11-22).
        set_json_loads(orjson.loads, dbapi_connection)

    return engine


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (a no-op when it is there already)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except OperationalError as exc:
        raise ConfigError(f"cannot reach PostgreSQL to migrate the registry: {exc.orig}") from exc


class Database:
    """Sessions for the registry: each `transaction()` commits on success, rolls back on error."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        try:
            with self._sessions.begin() as session:
                yield session
        except OperationalError as exc:
            raise RetryLater(f"the registry database is unreachable: {exc.orig}") from exc
        except ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) == "42P01":  # undefined table
                raise ConfigError("the registry schema is missing: run `wayline up` (it migrates)") from exc
            raise

    def current_version(self) -> int:
        """The registry version: one indexed row, cheap enough to poll every few seconds."""
        try:
            with self._sessions() as session:
                return current_version(session)
        except OperationalError as exc:
            # A transient outage: a poller keeps what it has and asks again.
            raise RetryLater(f"the registry database is unreachable: {exc.orig}") from exc


__all__ = ["Database", "MIGRATIONS", "make_engine", "migrate"]
