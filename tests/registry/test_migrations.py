"""Migrations build the schema from an empty database, and the version triggers work."""

import pytest
from sqlalchemy import create_engine, inspect, text

from wayline.registry.db import migrate

pytestmark = pytest.mark.integration


def test_migrations_run_up_from_empty_and_are_idempotent(settings, unique) -> None:
    import psycopg

    name = f"migrate_{unique}"
    server = settings.postgres_dsn().rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    engine = create_engine(f"postgresql+psycopg://{server.removeprefix('postgresql://')}/{name}")
    try:
        migrate(engine)
        migrate(engine)  # a second run finds nothing to do
        tables = set(inspect(engine).get_table_names())
        assert {"customers", "api_keys", "tenants", "event_types", "endpoints", "signing_secrets",
                "subscriptions", "registry_version", "idempotent_responses", "alembic_version"} <= tables
        with engine.begin() as conn:
            start = conn.execute(text("SELECT version FROM registry_version")).scalar()
            conn.execute(text("INSERT INTO tenants (id) VALUES ('t-1'), ('t-2')"))
        with engine.begin() as conn:
            assert conn.execute(text("SELECT version FROM registry_version")).scalar() == start + 1
            conn.execute(text("UPDATE tenants SET name = 'x'"))
            conn.execute(text("DELETE FROM tenants WHERE id = 't-1'"))
        with engine.begin() as conn:
            assert conn.execute(text("SELECT version FROM registry_version")).scalar() == start + 3
    finally:
        engine.dispose()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}"')
