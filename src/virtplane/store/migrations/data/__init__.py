"""Data migrations: stored bodies written by older releases, brought to the current shape.

Beside the schema's Alembic revisions (``../versions``), these rewrite what is inside
the bodies. ``upgrade_bodies`` runs inside the upgrade's one transaction (``Store.migrate``),
after the schema is at head and before ``normalize_bodies``; it returns one line per change
for the start-up log.
"""

from __future__ import annotations

from sqlalchemy import Connection


def upgrade_bodies(connection: Connection) -> list[str]:
    """Apply the data migrations this database has not had yet; what each changed, as log lines."""
    del connection
    return []


__all__ = ["upgrade_bodies"]
