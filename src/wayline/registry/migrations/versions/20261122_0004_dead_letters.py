"""Dead letters, the attempt log and endpoint health (see `wayline.delivery.storage.dead_letter`,
`wayline.delivery.storage.attempt_log` and `wayline.delivery.storage.drain`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Like the delivery log, no foreign keys: dead letters and attempts outlive a deleted
    # endpoint (the customer id is copied in so ownership survives too).
    op.create_table(
        "dead_letters",
        # Time-ordered `dl_` ids: the poll cursor is the last id seen.
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("webhook_id", sa.String(64), nullable=False, unique=True),
        sa.Column("customer_id", sa.String(40)),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("subscription_id", sa.String(40), nullable=False),
        sa.Column("event_ids", postgresql.ARRAY(sa.Text), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("attempts", sa.SmallInteger, nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("first_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dead_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_dead_letters_customer_id", "dead_letters", ["customer_id", "id"])
    op.create_index("ix_dead_letters_endpoint_dead_at", "dead_letters", ["endpoint_id", "dead_at"])
    op.create_table(
        "delivery_attempts",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("webhook_id", sa.String(64), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("subscription_id", sa.String(40), nullable=False),
        sa.Column("attempt", sa.SmallInteger, nullable=False),
        sa.Column("status", sa.SmallInteger),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_delivery_attempts_webhook_id", "delivery_attempts", ["webhook_id"])
    op.create_index("ix_delivery_attempts_endpoint_at", "delivery_attempts", ["endpoint_id", "attempted_at"])
    op.create_index("ix_delivery_log_endpoint_at", "delivery_log", ["endpoint_id", "delivered_at"])
    op.create_table(
        "endpoint_health",
        sa.Column("endpoint_id", sa.String(40), primary_key=True),
        # Since when every retry to it has failed; NULL once one succeeds.
        sa.Column("failing_since", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("endpoint_health")
    op.drop_index("ix_delivery_log_endpoint_at", table_name="delivery_log")
    op.drop_table("delivery_attempts")
    op.drop_table("dead_letters")
