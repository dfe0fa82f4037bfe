"""The selectable fields become columns the store writes with the body.

Migration 0002 made them columns the database generated from the body. On SQLite a
generated column's index entry is rewritten whenever the body is, so every status write
rewrote four index pages: 29 us a write against 11 (``bench/``). Written by the store,
an UPDATE names a field column only when its value changed (``schema.field_values``).
Each column is dropped and added again as a plain one, filled from the bodies, and
indexed as before.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# column -> path in the body (SQLite json_extract path, PostgreSQL #>> path), as in 0002
FIELD_COLUMNS = {
    "status_phase": ("$.status.phase", "{status,phase}"),
    "status_host": ("$.status.host", "{status,host}"),
    "spec_run_policy": ("$.spec.run_policy", "{spec,run_policy}"),
    "spec_vm": ("$.spec.vm", "{spec,vm}"),
}


def _extract(column: str, sqlite: bool) -> str:
    sqlite_path, pg_path = FIELD_COLUMNS[column]
    return f"json_extract(body, '{sqlite_path}')" if sqlite else f"(body::jsonb) #>> '{pg_path}'"


def _drop(column: str) -> None:
    op.drop_index(f"ix_objects_{column}", "objects")
    op.execute(f"ALTER TABLE objects DROP COLUMN {column}")


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for column in FIELD_COLUMNS:
        _drop(column)
        op.execute(f"ALTER TABLE objects ADD COLUMN {column} TEXT")
    op.execute(
        "UPDATE objects SET "
        + ", ".join(f"{column} = {_extract(column, sqlite)}" for column in FIELD_COLUMNS)
    )
    for column in FIELD_COLUMNS:
        op.create_index(f"ix_objects_{column}", "objects", ["kind", column, "name"])


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for column in FIELD_COLUMNS:
        _drop(column)
        kind = "VIRTUAL" if sqlite else "STORED"  # SQLite can add only VIRTUAL generated columns
        op.execute(
            f"ALTER TABLE objects ADD COLUMN {column} TEXT GENERATED ALWAYS AS ({_extract(column, sqlite)}) {kind}"
        )
        op.create_index(f"ix_objects_{column}", "objects", ["kind", column, "name"])
