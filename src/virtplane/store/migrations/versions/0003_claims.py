"""Claims: values an object holds alone (a NIC's address on a network, a MAC).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claims",
        sa.Column("scope", sa.String(128), primary_key=True),
        sa.Column("value", sa.String(255), primary_key=True),
        sa.Column("owner_kind", sa.String(64), nullable=False),
        sa.Column("owner_name", sa.String(255), nullable=False),
        sa.Column("owner_uid", sa.String(36), nullable=False),
    )
    op.create_index("ix_claims_owner", "claims", ["owner_uid"])


def downgrade() -> None:
    op.drop_table("claims")
