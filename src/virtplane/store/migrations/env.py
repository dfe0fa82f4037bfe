"""Alembic environment: always run with a connection handed in by ``virtplane.store.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from virtplane.store.schema import metadata

connection: Connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
