"""Hardening: no secret in idempotency records, which now expire; why a subscription was
disabled; test events counted per endpoint for their rate limit.

Revision ID: 0011a
Revises: 0006
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0011a"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Replay records of POST /api-keys held the key itself: keep that the key was made, not the key.
    op.execute("UPDATE idempotent_responses SET body = body - 'key' WHERE jsonb_typeof(body) = 'object' AND body ? 'key'")
    op.create_index("ix_idempotent_responses_created_at", "idempotent_responses", ["created_at"])
    op.add_column("subscriptions", sa.Column("disabled_reason", sa.Text()))
    op.add_column("subscriptions", sa.Column("disabled_at", sa.DateTime(timezone=True)))
    op.create_table(
        "test_event_sends",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("endpoint_id", sa.String(40), sa.ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_test_event_sends_endpoint_id_sent_at", "test_event_sends", ["endpoint_id", "sent_at"])


def downgrade() -> None:
    op.drop_index("ix_test_event_sends_endpoint_id_sent_at", table_name="test_event_sends")
    op.drop_table("test_event_sends")
    op.drop_column("subscriptions", "disabled_at")
    op.drop_column("subscriptions", "disabled_reason")
    op.drop_index("ix_idempotent_responses_created_at", table_name="idempotent_responses")
