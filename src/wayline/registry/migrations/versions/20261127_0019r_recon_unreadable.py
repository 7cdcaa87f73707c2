"""Reconciliation metrics count the records a reconciliation could not read (issue 23).

Revision ID: 0019r
Revises: 0018c
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0019r"
down_revision = "0018c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Records of a reconciliation's topics it cannot read (not an event, no id, no time):
    # counted per (reconciliation, source, window) like the other figures, and quarantined.
    op.add_column("recon_metrics", sa.Column("unreadable", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("recon_metrics", "unreadable")
