"""Console sessions on the server: signing out ends a session, not only its cookie.

- ``console_sessions``: a signed-in console session (its token's SHA-256, its key, its
  expiry); the browser's cookie carries the token.

Revision ID: 0017c
Revises: 0016j
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0017c"
down_revision = "0016j"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("api_key_id", sa.String(40), sa.ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_expires_at", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires_at", table_name="console_sessions")
    op.drop_table("console_sessions")
