"""Data migrations: stored bodies written by older releases, brought to the current shape.

Beside the schema's Alembic revisions (``../versions``), these rewrite what is inside
the bodies. ``upgrade_bodies`` runs inside the upgrade's one transaction (``Store.migrate``),
after the schema is at head and before ``normalize_bodies``; it returns one line per change
for the start-up log.

Each migration is a module ``dNNNN_what.py``: a pure function over one JSON body (and
the pools and images, read-only), numbered; the ``feed_state`` row ``data:version`` holds
the number of the last one this database had, so each runs once. A body a migration
changes is written with a new revision (a change the feed and the watches see, as any
write's) and the same generation (the owner's intent is the same, restated), and an
event on the object says what changed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, insert, select, update

from virtplane.domain.resources import KIND_BY_NAME
from virtplane.store import schema
from virtplane.store.database import utcnow
from virtplane.store.migrations.data import d0001_volume_file, d0002_host_paths, d0003_sealed_secrets
from virtplane.store.migrations.data.base import LOOKED_AT, Body, DataMigration
from virtplane.store.sealing import Keyring

MIGRATIONS: tuple[DataMigration, ...] = (
    d0001_volume_file.MIGRATION,
    d0002_host_paths.MIGRATION,
    d0003_sealed_secrets.MIGRATION,
)
LATEST = MIGRATIONS[-1].version
VERSION_ROW = "data:version"

_objects = schema.objects
_state = schema.feed_state


def data_version(connection: Connection) -> int | None:
    """The number of the last data migration this database had (None: it never had any)."""
    value = connection.execute(select(_state.c.revision).where(_state.c.name == VERSION_ROW)).scalar()
    return None if value is None else int(value)


def upgrade_bodies(connection: Connection, keyring: Keyring | None = None) -> list[str]:
    """Apply the data migrations this database has not had yet; what each changed, as log lines.
    ``keyring``: the secrets key, for the migrations that seal (``DataMigration.keyed``)."""
    applied = data_version(connection)
    pending = [m.bound(keyring) for m in MIGRATIONS if m.version > (applied or 0)]
    lines: list[str] = []
    if pending:
        if connection.dialect.name == "sqlite":  # a rewritten row's old bytes (a password) zeroed
            connection.exec_driver_sql("PRAGMA secure_delete = ON")
        known = {kind: [body for _, body in items] for kind, items in _bodies(connection, LOOKED_AT).items()}
        kinds = sorted({kind for migration in pending for kind in migration.kinds})
        for kind, items in _bodies(connection, kinds).items():
            for name, body in items:
                try:
                    changes = [
                        change
                        for migration in pending
                        if kind in migration.kinds
                        for change in migration.upgrade(kind, body, known)
                    ]
                except (TypeError, KeyError, AttributeError, ValueError) as exc:
                    # a body of a shape no release wrote: the store's start-up names it and
                    # serves the rest; the upgrade of every other object goes on
                    lines.append(f"{kind}/{name}: left as it was, not understood ({exc!r})")
                    continue
                if changes:
                    _write(connection, kind, name, body, changes)
                    lines += [f"{kind}/{name}: {change}" for change in changes]
        done = [str(m.version) for m in pending]
        lines.append(f"data migrations {', '.join(done)} applied: {len(lines)} line(s) above")
    if applied is None:
        connection.execute(insert(_state).values(name=VERSION_ROW, revision=LATEST))
    elif applied < LATEST:
        connection.execute(update(_state).where(_state.c.name == VERSION_ROW).values(revision=LATEST))
    return lines


def _bodies(connection: Connection, kinds: tuple[str, ...] | list[str]) -> dict[str, list[tuple[str, Body]]]:
    """The stored bodies of ``kinds`` that are JSON objects, with their names, by kind."""
    found: dict[str, list[tuple[str, Body]]] = defaultdict(list)
    rows = connection.execute(
        select(_objects.c.kind, _objects.c.name, _objects.c.body)
        .where(_objects.c.kind.in_(kinds))
        .order_by(_objects.c.name)
    )
    for kind, name, text in rows:
        try:
            body = json.loads(text)
        except ValueError:
            continue  # not JSON: nothing to migrate in it (the start-up names it)
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            found[kind].append((name, body))
    return found


def _write(connection: Connection, kind: str, name: str, body: Body, changes: list[str]) -> None:
    """The body with a new revision, and an event on the object for each change."""
    revision = connection.execute(
        insert(schema.changes)
        .values(kind=kind, name=name, op="modified")
        .returning(schema.changes.c.revision)
    ).scalar_one()
    body["metadata"]["resource_version"] = revision
    text = _serialized(kind, body)
    connection.execute(
        update(_objects)
        .where(_objects.c.kind == kind, _objects.c.name == name)
        .values(body=text, resource_version=revision, **schema.field_values(json.loads(text)))
    )
    now = utcnow()
    connection.execute(
        insert(schema.events),
        [
            {
                "time": now,
                "kind": kind,
                "name": name,
                "type": "Warning" if "does not exist" in change else "Normal",
                "reason": "Upgraded",
                "message": change,
            }
            for change in changes
        ],
    )


def _serialized(kind: str, body: Body) -> str:
    """As the current model writes it; as it is where something else in it is still unreadable
    (the store's start-up says which object, and serves the rest)."""
    model: Any = KIND_BY_NAME.get(kind)
    if model is not None:
        try:
            return str(model.model_validate(body).model_dump_json())
        except ValidationError:
            pass
    return json.dumps(body, separators=(",", ":"))


__all__ = ["LATEST", "MIGRATIONS", "data_version", "upgrade_bodies"]
