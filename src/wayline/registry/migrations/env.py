"""Alembic environment: migrations run on a connection handed in by `wayline.registry.db.migrate`."""

from alembic import context

from wayline.registry.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
