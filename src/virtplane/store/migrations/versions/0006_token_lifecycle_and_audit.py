"""Token lifecycle (description, owner, expiry, last use, revocation) and the audit log.

Tokens were stored as the SHA-256 of the token since 0001 (never in clear), so existing
tokens keep working as they are: the data migration only gives each one an owner (its own
name, the best an older release knew) and an empty description. None of them expires.

``audit`` holds one row per write and per console session: who (the token's name and its
owner), from where, what (verb, kind, name, the top-level paths written), when, and the outcome.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("description", sa.Text, nullable=False, server_default=""))
        batch.add_column(sa.Column("owner", sa.String(255), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_by", sa.String(255), nullable=True))
    # the data migration: an existing token is its own owner (identities come later)
    op.execute(sa.text("UPDATE tokens SET owner = name WHERE owner IS NULL"))
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token", sa.String(255), nullable=True),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("client", sa.String(255), nullable=False),
        sa.Column("verb", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("subresource", sa.String(64), nullable=False),
        sa.Column("fields", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("reason", sa.String(128), nullable=False),
    )
    op.create_index("ix_audit_time", "audit", ["time"])
    op.create_index("ix_audit_object", "audit", ["kind", "name", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_object", "audit")
    op.drop_index("ix_audit_time", "audit")
    op.drop_table("audit")
    with op.batch_alter_table("tokens") as batch:
        for column in ("revoked_by", "revoked_at", "last_used_at", "expires_at", "owner", "description"):
            batch.drop_column(column)
