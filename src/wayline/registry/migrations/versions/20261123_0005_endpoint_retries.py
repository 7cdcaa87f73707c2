"""Per-endpoint retry schedules and retried 4xx statuses; Wayline's operational event types.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Literal copies, not imports: a migration must keep meaning what it meant when written.
OPERATIONAL_EVENT_TYPES = {
    "wayline.endpoint.disabled": "Wayline disabled one of your endpoints; data.reason says why.",
    "wayline.message.dead_lettered": "A message to one of your endpoints used up its retries; see /dead-letters.",
}


def upgrade() -> None:
    # NULL: the deployment's schedule (delivery.retry_schedule_s).
    op.add_column("endpoints", sa.Column("retry_schedule_s", postgresql.ARRAY(sa.Float)))
    op.add_column("endpoints", sa.Column("retry_statuses", postgresql.ARRAY(sa.SmallInteger), nullable=False,
                                         server_default="{}"))
    event_types = sa.table("event_types", sa.column("name", sa.Text), sa.column("description", sa.Text))
    op.execute(
        postgresql.insert(event_types)
        .values([{"name": name, "description": text} for name, text in OPERATIONAL_EVENT_TYPES.items()])
        .on_conflict_do_nothing()
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM event_types WHERE name = ANY(:names)").bindparams(
        names=list(OPERATIONAL_EVENT_TYPES)))
    op.drop_column("endpoints", "retry_statuses")
    op.drop_column("endpoints", "retry_schedule_s")
