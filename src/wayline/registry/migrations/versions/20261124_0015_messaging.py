"""Messaging API: which topics a key may publish to or poll, and answered publish requests.

Revision ID: 0015
Revises: 0011a
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0015"
down_revision = "0011a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "topic_grants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("api_key_id", sa.String(40), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("pattern", sa.Text, nullable=False),
        sa.Column("actions", ARRAY(sa.Text), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "publish_requests",
        sa.Column("api_key_id", sa.String(40), primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("status_code", sa.Integer),
        sa.Column("body", JSONB),
    )


def downgrade() -> None:
    op.drop_table("publish_requests")
    op.drop_table("topic_grants")
