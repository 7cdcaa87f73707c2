"""Indexes for retention: the retry query deletes delivery history and dead letters by age.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_delivery_log_delivered_at", "delivery_log", ["delivered_at"])
    op.create_index("ix_delivery_attempts_attempted_at", "delivery_attempts", ["attempted_at"])
    op.create_index("ix_dead_letters_dead_at", "dead_letters", ["dead_at"])


def downgrade() -> None:
    op.drop_index("ix_dead_letters_dead_at", table_name="dead_letters")
    op.drop_index("ix_delivery_attempts_attempted_at", table_name="delivery_attempts")
    op.drop_index("ix_delivery_log_delivered_at", table_name="delivery_log")
