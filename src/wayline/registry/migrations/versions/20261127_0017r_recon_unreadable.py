"""Reconciliation metrics count the records a reconciliation could not read (issue 23).

Revision ID: 0017r
Revises: 0016j
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0017r"
down_revision = "0016j"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Records of a reconciliation's topics it cannot read (not an event, no id, no time):
    # counted per (reconciliation, source, window) like the other figures, and quarantined.
    op.add_column("recon_metrics", sa.Column("unreadable", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("recon_metrics", "unreadable")
