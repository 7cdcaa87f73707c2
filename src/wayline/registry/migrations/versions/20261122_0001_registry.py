"""The registry: customers, keys, tenants, event types, endpoints, secrets, subscriptions.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

VERSIONED_TABLES = ("customers", "tenants", "event_types", "endpoints", "signing_secrets", "subscriptions")


def _timestamps() -> list[sa.Column]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "registry_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.execute("INSERT INTO registry_version (id, version) VALUES (1, 1)")
    op.create_table(
        "customers",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("tenants", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        *_timestamps(),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("customer_id", sa.String(40), sa.ForeignKey("customers.id", ondelete="CASCADE")),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        *_timestamps(),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False, server_default=""),
        sa.Column("subtenants", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        *_timestamps(),
    )
    op.create_table(
        "event_types",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("json_schema", postgresql.JSONB),
        *_timestamps(),
    )
    op.create_table(
        "endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("customer_id", sa.String(40), sa.ForeignKey("customers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("auth_kind", sa.String(16), nullable=False, server_default="none"),
        sa.Column("auth_encrypted", sa.LargeBinary),
        sa.Column("timeout_ms", sa.Integer, nullable=False),
        sa.Column("max_in_flight", sa.Integer, nullable=False),
        sa.Column("rate_limit_per_s", sa.Integer),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default="true"),
        sa.Column("disabled_reason", sa.Text),
        sa.Column("disabled_at", sa.DateTime(timezone=True)),
        *_timestamps(),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_endpoints_customer_id", "endpoints", ["customer_id"])
    op.create_table(
        "signing_secrets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("endpoint_id", sa.String(40), sa.ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
        sa.Column("secret_encrypted", sa.LargeBinary, nullable=False),
        *_timestamps(),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_signing_secrets_endpoint_id", "signing_secrets", ["endpoint_id"])
    op.create_table(
        "subscriptions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("endpoint_id", sa.String(40), sa.ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
        sa.Column("customer_id", sa.String(40), sa.ForeignKey("customers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event_types", postgresql.ARRAY(sa.Text), nullable=False),
        sa.Column("tenant_scope", sa.String(16), nullable=False),
        sa.Column("tenants", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("subtenants", postgresql.JSONB, nullable=False, server_default="[]"),
        sa.Column("filter", postgresql.JSONB),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("max_count", sa.Integer),
        sa.Column("max_wait_ms", sa.Integer),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default="true"),
        *_timestamps(),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_subscriptions_endpoint_id", "subscriptions", ["endpoint_id"])
    op.create_index("ix_subscriptions_customer_id", "subscriptions", ["customer_id"])
    op.create_table(
        "idempotent_responses",
        sa.Column("api_key_id", sa.String(40), primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("body", postgresql.JSONB, nullable=False),
        *_timestamps(),
    )
    # The version moves in the same transaction as the change, whoever makes it (API, CLI
    # or plain SQL), so a pipeline that sees a version sees every change before it.
    op.execute(
        """
        CREATE FUNCTION bump_registry_version() RETURNS trigger AS $$
        BEGIN
            UPDATE registry_version SET version = version + 1, updated_at = now() WHERE id = 1;
            RETURN NULL;
        END $$ LANGUAGE plpgsql
        """
    )
    for table in VERSIONED_TABLES:
        op.execute(
            f"CREATE TRIGGER {table}_bump_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
            f"ON {table} FOR EACH STATEMENT EXECUTE FUNCTION bump_registry_version()"
        )


def downgrade() -> None:
    for table in VERSIONED_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_bump_version ON {table}")
    op.execute("DROP FUNCTION IF EXISTS bump_registry_version()")
    for table in ("idempotent_responses", "subscriptions", "signing_secrets", "endpoints", "event_types",
                  "tenants", "api_keys", "customers", "registry_version"):
        op.drop_table(table)
