"""Rules: SQL rules and MATCH_RECOGNIZE patterns, with their own version row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A version of its own, not the registry's: the rules job polls it, and a rule change
    # must not make the delivery pipeline reload its subscription snapshot.
    op.create_table(
        "rules_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.execute("INSERT INTO rules_version (id, version) VALUES (1, 1)")
    op.create_table(
        "rules",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.Text, nullable=False, unique=True),
        sa.Column("sql", sa.Text, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("partition_key", postgresql.ARRAY(sa.Text), nullable=False, server_default="{}"),
        sa.Column("output_topic", sa.Text, nullable=False),
        sa.Column("output_type", sa.Text, nullable=False),
        sa.Column("state_budget", sa.Integer, nullable=False),
        sa.Column("time_budget_ms", sa.Integer, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default="true"),
        sa.Column("status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("error", sa.Text),
        sa.Column("quarantines", sa.Integer, nullable=False, server_default="0"),
        # Bumped when the definition changes: the job keys a rule's state by (id, revision),
        # so a changed rule starts with fresh state.
        sa.Column("revision", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.execute(
        """
        CREATE FUNCTION bump_rules_version() RETURNS trigger AS $$
        BEGIN
            UPDATE rules_version SET version = version + 1, updated_at = now() WHERE id = 1;
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        "CREATE TRIGGER rules_bump_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
        "ON rules FOR EACH STATEMENT EXECUTE FUNCTION bump_rules_version()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS rules_bump_version ON rules")
    op.execute("DROP FUNCTION IF EXISTS bump_rules_version()")
    op.drop_table("rules")
    op.drop_table("rules_version")
