"""Indexes for paged, filtered lists and watches: selectable fields, a label index, the change horizon.

- ``objects`` gets one generated column per selectable field (``virtplane.domain.selectors``),
  computed by the database from the JSON body, each indexed with the kind and the name so
  that a page in name order is an index range. The store's writes need not know of them.
- ``object_labels`` holds one row per label of every object, kept by triggers on
  ``objects``: a label selector reads an index instead of every body of the kind.
- ``changes`` gets an index by kind, for watches of one kind.
- ``feed_state`` remembers up to which revision the change feed was compacted, so that a
  watch or a continue token from before it is refused (410) rather than silently short.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# column -> path in the body (SQLite json_extract path, PostgreSQL #>> path)
FIELD_COLUMNS = {
    "status_phase": ("$.status.phase", "{status,phase}"),
    "status_host": ("$.status.host", "{status,host}"),
    "spec_run_policy": ("$.spec.run_policy", "{spec,run_policy}"),
    "spec_vm": ("$.spec.vm", "{spec,vm}"),
}

LABEL_PREFIX = 200  # characters of a label value kept in the index (a value may have 4096)

_SQLITE_TRIGGERS = [
    """CREATE TRIGGER objects_labels_insert AFTER INSERT ON objects BEGIN
      INSERT INTO object_labels (kind, name, key, value, value_prefix)
      SELECT NEW.kind, NEW.name, j.key, j.value, substr(j.value, 1, {prefix})
      FROM json_each(NEW.body, '$.metadata.labels') AS j;
    END""",
    """CREATE TRIGGER objects_labels_update AFTER UPDATE OF body ON objects
    WHEN json_extract(OLD.body, '$.metadata.labels') IS NOT json_extract(NEW.body, '$.metadata.labels')
    BEGIN
      DELETE FROM object_labels WHERE kind = OLD.kind AND name = OLD.name;
      INSERT INTO object_labels (kind, name, key, value, value_prefix)
      SELECT NEW.kind, NEW.name, j.key, j.value, substr(j.value, 1, {prefix})
      FROM json_each(NEW.body, '$.metadata.labels') AS j;
    END""",
    """CREATE TRIGGER objects_labels_delete AFTER DELETE ON objects BEGIN
      DELETE FROM object_labels WHERE kind = OLD.kind AND name = OLD.name;
    END""",
]

_POSTGRES_TRIGGERS = [
    """CREATE FUNCTION objects_labels_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM object_labels WHERE kind = OLD.kind AND name = OLD.name;
      END IF;
      IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO object_labels (kind, name, key, value, value_prefix)
        SELECT NEW.kind, NEW.name, l.key, l.value, substr(l.value, 1, {prefix})
        FROM jsonb_each_text((NEW.body::jsonb) #> '{{metadata,labels}}') AS l;
      END IF;
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER objects_labels_insert AFTER INSERT ON objects
    FOR EACH ROW EXECUTE FUNCTION objects_labels_sync()""",
    """CREATE TRIGGER objects_labels_update AFTER UPDATE OF body ON objects FOR EACH ROW
    WHEN ((OLD.body::jsonb) #> '{{metadata,labels}}' IS DISTINCT FROM (NEW.body::jsonb) #> '{{metadata,labels}}')
    EXECUTE FUNCTION objects_labels_sync()""",
    """CREATE TRIGGER objects_labels_delete AFTER DELETE ON objects
    FOR EACH ROW EXECUTE FUNCTION objects_labels_sync()""",
]


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for column, (sqlite_path, pg_path) in FIELD_COLUMNS.items():
        if sqlite:
            # SQLite can add only VIRTUAL generated columns; their index stores the value
            op.execute(
                f"ALTER TABLE objects ADD COLUMN {column} TEXT "
                f"GENERATED ALWAYS AS (json_extract(body, '{sqlite_path}')) VIRTUAL"
            )
        else:
            op.execute(
                f"ALTER TABLE objects ADD COLUMN {column} TEXT "
                f"GENERATED ALWAYS AS ((body::jsonb) #>> '{pg_path}') STORED"
            )
        op.create_index(f"ix_objects_{column}", "objects", ["kind", column, "name"])

    op.create_table(
        "object_labels",
        sa.Column("kind", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(320), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("value_prefix", sa.String(LABEL_PREFIX), nullable=False),
    )
    op.create_index("ix_object_labels_value", "object_labels", ["kind", "key", "value_prefix", "name"])
    for statement in _SQLITE_TRIGGERS if sqlite else _POSTGRES_TRIGGERS:
        op.execute(statement.format(prefix=LABEL_PREFIX))
    if sqlite:
        op.execute(
            "INSERT INTO object_labels (kind, name, key, value, value_prefix) "
            f"SELECT o.kind, o.name, j.key, j.value, substr(j.value, 1, {LABEL_PREFIX}) "
            "FROM objects AS o, json_each(o.body, '$.metadata.labels') AS j"
        )
    else:
        op.execute(
            "INSERT INTO object_labels (kind, name, key, value, value_prefix) "
            f"SELECT o.kind, o.name, l.key, l.value, substr(l.value, 1, {LABEL_PREFIX}) "
            "FROM objects AS o, jsonb_each_text((o.body::jsonb) #> '{metadata,labels}') AS l"
        )

    op.create_index("ix_changes_kind", "changes", ["kind", "revision"])
    op.create_table(
        "feed_state",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("revision", sa.Integer, nullable=False),
    )
    op.execute("INSERT INTO feed_state (name, revision) VALUES ('compacted', 0)")


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.drop_table("feed_state")
    op.drop_index("ix_changes_kind", "changes")
    for trigger in ("objects_labels_insert", "objects_labels_update", "objects_labels_delete"):
        op.execute(f"DROP TRIGGER {trigger}" if sqlite else f"DROP TRIGGER {trigger} ON objects")
    if not sqlite:
        op.execute("DROP FUNCTION objects_labels_sync()")
    op.drop_table("object_labels")
    for column in FIELD_COLUMNS:
        op.drop_index(f"ix_objects_{column}", "objects")
        op.execute(f"ALTER TABLE objects DROP COLUMN {column}")
