"""Reference tables: keyed JSON rows that join rules look events up in.

Revision ID: 0016j
Revises: 0015
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016j"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reference_tables",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        # Bumped by every change to the table's rows: the rules job polls it and reloads the
        # table into Spark when it moves.
        sa.Column("version", sa.BigInteger, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "reference_rows",
        sa.Column("table_name", sa.Text, sa.ForeignKey("reference_tables.name", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("data", postgresql.JSONB, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reference_rows")
    op.drop_table("reference_tables")
