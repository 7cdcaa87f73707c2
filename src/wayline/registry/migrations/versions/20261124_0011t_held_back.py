"""Only real attempts spend the retry budget; an endpoint's Retry-After and a 410 hold for every sender.

- ``delivery_attempts.held_back``: a row for a delivery that was not sent (circuit open,
  endpoint throttled, no slot before the stage deadline) — shown, but not an attempt;
- ``endpoint_health.throttled_until``: nothing goes to the endpoint before then;
- ``gone_subscriptions``: subscriptions whose endpoint answered 410 Gone (until the
  subscription changes again), checked by every stage before it sends.

Revision ID: 0011t
Revises: 0011a
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0011t"
down_revision = "0011a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("delivery_attempts",
                  sa.Column("held_back", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("endpoint_health", sa.Column("throttled_until", sa.DateTime(timezone=True)))
    op.create_table(
        "gone_subscriptions",
        sa.Column("subscription_id", sa.String(40), primary_key=True),
        sa.Column("gone_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("gone_subscriptions")
    op.drop_column("endpoint_health", "throttled_until")
    op.drop_column("delivery_attempts", "held_back")
