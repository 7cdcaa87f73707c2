"""Delivery outcomes: the delivery log and the retry store (see `wayline.delivery.storage.store`).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No foreign keys to the registry: the log and the retry store must outlive a deleted
    # endpoint or subscription, and their writes must not lock registry rows.
    op.create_table(
        "delivery_log",
        sa.Column("webhook_id", sa.String(64), primary_key=True),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("subscription_id", sa.String(40), nullable=False),
        sa.Column("status", sa.SmallInteger, nullable=False),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("attempt", sa.SmallInteger, nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "retry_store",
        sa.Column("webhook_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("subscription_id", sa.String(40), nullable=False),
        sa.Column("event_ids", postgresql.ARRAY(sa.Text), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("attempts", sa.SmallInteger, nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("dead_reason", sa.String(16)),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_retry_store_due_at", "retry_store", ["due_at"], postgresql_where=sa.text("dead_reason IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_retry_store_due_at", table_name="retry_store")
    op.drop_table("retry_store")
    op.drop_table("delivery_log")
