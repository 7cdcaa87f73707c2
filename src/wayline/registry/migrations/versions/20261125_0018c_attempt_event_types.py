"""The event type of each logged delivery, for the attempt log.

- ``delivery_log.event_type``, ``delivery_attempts.event_type``: the CloudEvent type of
  what was sent (a batch: its types, comma-separated). NULL for rows written before.

Revision ID: 0018c
Revises: 0017c
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0018c"
down_revision = "0017c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: PostgreSQL adds the column without rewriting the table.
    op.add_column("delivery_log", sa.Column("event_type", sa.Text))
    op.add_column("delivery_attempts", sa.Column("event_type", sa.Text))


def downgrade() -> None:
    op.drop_column("delivery_attempts", "event_type")
    op.drop_column("delivery_log", "event_type")
