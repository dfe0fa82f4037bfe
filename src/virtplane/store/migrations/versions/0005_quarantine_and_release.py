"""Quarantine (stored objects the current models cannot read) and the store's own facts (``store_meta``).

An object whose body the models of the release that opens the store cannot validate is
moved out of ``objects`` into ``quarantine``, with the reason, so that one bad record
does not keep the server from starting; its claims (addresses, MACs) stay held.
``store_meta`` holds facts about the store itself: ``release``, the version of the
release that last upgraded it (a release that finds a newer one there refuses to start).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quarantine",
        sa.Column("kind", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("uid", sa.String(36), primary_key=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("release", sa.String(64), nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("store_meta")
    op.drop_table("quarantine")
