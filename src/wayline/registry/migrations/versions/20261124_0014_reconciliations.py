"""Reconciliations, their version row, and what the recon job keeps: metrics per window,
the ids currently missing, and each job's last applied micro-batch.

Revision ID: 0014
Revises: 0011t
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0011t"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A version of its own, as the rules have: the recon job polls it, and a change to a
    # reconciliation must not make the delivery job reload its snapshot.
    op.create_table(
        "recon_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.execute("INSERT INTO recon_version (id, version) VALUES (1, 1)")
    op.create_table(
        "reconciliations",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.Text, nullable=False, unique=True),
        # {"role", "topics", "pattern", "id", "source", "time"} for each side.
        sa.Column("expected", postgresql.JSONB, nullable=False),
        sa.Column("actual", postgresql.JSONB, nullable=False),
        sa.Column("o_ms", sa.BigInteger, nullable=False),
        sa.Column("n_ms", sa.BigInteger, nullable=False),
        sa.Column("m_ms", sa.BigInteger, nullable=False),
        sa.Column("z_ms", sa.BigInteger, nullable=False),
        sa.Column("output_topic", sa.Text, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default="true"),
        sa.Column("revision", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.execute(
        """
        CREATE FUNCTION bump_recon_version() RETURNS trigger AS $$
        BEGIN
            UPDATE recon_version SET version = version + 1, updated_at = now() WHERE id = 1;
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        "CREATE TRIGGER reconciliations_bump_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
        "ON reconciliations FOR EACH STATEMENT EXECUTE FUNCTION bump_recon_version()"
    )
    # One row per (reconciliation, source, window); the job adds each micro-batch's changes.
    # revision 0: not yet published (the window is still open); each publication bumps it.
    op.create_table(
        "recon_metrics",
        sa.Column("reconciliation_id", sa.String(40), sa.ForeignKey("reconciliations.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(name, sa.BigInteger, nullable=False, server_default="0") for name in (
            "expected", "matched", "missing", "found", "duplicates", "late", "too_late")),
        sa.Column("revision", sa.Integer, nullable=False, server_default="0"),
        sa.Column("changed", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "recon_missing",
        sa.Column("reconciliation_id", sa.String(40), sa.ForeignKey("reconciliations.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("expected_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "recon_progress",
        sa.Column("reconciliation_id", sa.String(40), sa.ForeignKey("reconciliations.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("watermark", sa.DateTime(timezone=True)),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    # The last micro-batch whose changes a job applied: a replayed batch adds nothing twice.
    op.create_table(
        "recon_batches",
        sa.Column("job", sa.Text, primary_key=True),
        sa.Column("batch_id", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("recon_batches")
    op.drop_table("recon_progress")
    op.drop_table("recon_missing")
    op.drop_table("recon_metrics")
    op.execute("DROP TRIGGER IF EXISTS reconciliations_bump_version ON reconciliations")
    op.execute("DROP FUNCTION IF EXISTS bump_recon_version()")
    op.drop_table("reconciliations")
    op.drop_table("recon_version")
