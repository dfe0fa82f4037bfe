"""Initial schema: objects, change feed, events, tokens, leases.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "objects",
        sa.Column("kind", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("uid", sa.String(36), nullable=False),
        sa.Column("resource_version", sa.Integer, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "changes",
        sa.Column("revision", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(128), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_index("ix_events_object", "events", ["kind", "name", "id"])
    op.create_table(
        "tokens",
        sa.Column("token_sha256", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    for table in ("leases", "tokens", "events", "changes", "objects"):
        op.drop_table(table)
