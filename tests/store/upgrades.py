"""Stores as older releases left them, and what a database holds, for the upgrade tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from virtplane.domain.ipam import Claim
from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store.store import MIGRATIONS, Store


def store_at(url: str, revision: str) -> Store:
    """A store whose schema Alembic brought to ``revision`` only, as an older release did."""
    store = Store(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return store


def old_vm(store: Store, name: str, cpu: int = 1) -> None:
    """A VM as an older model wrote it: without ``spec.termination_grace_period_s``."""
    store.create(VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(cpu=cpu)))
    set_body(store, "VirtualMachine", name, lambda body: body["spec"].pop("termination_grace_period_s"))


CLAIMS = [Claim("mac", "52:54:00:00:00:01"), Claim("ip/lan", "10.1.0.20")]


def unreadable_vm(store: Store) -> None:
    """VMs "good" and "bad" (which holds CLAIMS), with a stored spec.cpu of bad's that no model of
    this release reads, under a schema fingerprint of another release."""
    store.create(VirtualMachine(metadata=Metadata(name="good"), spec=VirtualMachineSpec(cpu=1)))
    store.create(VirtualMachine(metadata=Metadata(name="bad"), spec=VirtualMachineSpec(cpu=1)), claims=CLAIMS)
    set_body(store, "VirtualMachine", "bad", lambda body: body["spec"].update(cpu="lots"))
    forget_fingerprints(store)


def set_body(store: Store, kind: str, name: str, edit: Any) -> None:
    """Edit the stored JSON body of ``kind/name`` in place, bypassing the models."""
    with store.engine.begin() as connection:
        body = json.loads(
            connection.execute(
                text("SELECT body FROM objects WHERE kind = :kind AND name = :name"),
                {"kind": kind, "name": name},
            ).scalar_one()
        )
        edit(body)
        connection.execute(
            text("UPDATE objects SET body = :body WHERE kind = :kind AND name = :name"),
            {"body": json.dumps(body), "kind": kind, "name": name},
        )


def forget_fingerprints(store: Store) -> None:
    """As if the bodies were written under another schema than the code's."""
    with store.engine.begin() as connection:
        connection.execute(text("DELETE FROM feed_state WHERE name LIKE 'schema:%'"))


def contents(store: Store) -> dict[str, Any]:
    """Everything the database holds: each table's columns and rows (SQLite: its schema's SQL too)."""
    found: dict[str, Any] = {}
    with store.engine.connect() as connection:
        inspector = inspect(connection)
        for table in sorted(inspector.get_table_names()):
            columns = [column["name"] for column in inspector.get_columns(table)]
            rows = connection.execute(text(f'SELECT * FROM "{table}"')).all()
            found[table] = (columns, sorted(tuple(str(value) for value in row) for row in rows))
        if store.is_sqlite:
            found["sqlite_master"] = sorted(
                tuple(row) for row in connection.execute(text("SELECT type, name, sql FROM sqlite_master"))
            )
    return found


def file_bytes(path: Path) -> dict[str, bytes]:
    """The database file and its WAL and shared-memory companions, as they are on disk."""
    return {p.name: p.read_bytes() for p in sorted(path.parent.glob(path.name + "*"))}
