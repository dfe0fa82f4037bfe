"""The field columns (``schema.FIELD_PATHS``) say what the body says, after every write path.

Since migration 0004 the store writes them with the body, naming in an UPDATE only those whose
value changed; a path that forgot one would leave a list by that field wrong, silently. Each
test drives one path and then compares every row's columns with its body.
"""

from __future__ import annotations

import json
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import select, text

import virtplane.store
from virtplane.domain.resources import (
    Metadata,
    OperationType,
    RunPolicy,
    VirtualMachine,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
    VMPhase,
)
from virtplane.store import Store, sqlite_url
from virtplane.store.bodies import normalize_bodies
from virtplane.store.schema import FIELD_PATHS, field_values, objects
from virtplane.store.upgrade import head_revision
from virtplane.store.writes import StatusWrite


def columns_and_bodies(store: Store) -> dict[str, tuple[dict[str, str | None], dict[str, str | None]]]:
    """Each object's field columns as stored, and as its body says."""
    with store.engine.connect() as connection:
        rows = connection.execute(
            select(objects.c.name, objects.c.body, *(objects.c[c] for c in FIELD_PATHS))
        )
        return {
            row.name: ({c: getattr(row, c) for c in FIELD_PATHS}, field_values(json.loads(row.body)))
            for row in rows
        }


def assert_columns_follow_bodies(store: Store) -> None:
    for name, (stored, body) in columns_and_bodies(store).items():
        assert stored == body, name


def vm(name: str) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(run_policy=RunPolicy.MANUAL))


def test_a_create_writes_every_field(store: Store) -> None:
    store.create(vm("a"))
    op = VirtualMachineOperation(
        metadata=Metadata(name="op"), spec=VirtualMachineOperationSpec(vm="a", type=OperationType.START)
    )
    store.create_many([op])
    store.create_many([vm("b")])
    stored = columns_and_bodies(store)
    assert stored["a"][0] == {
        "status_phase": VMPhase.PENDING.value,
        "status_host": None,
        "spec_run_policy": "Manual",
        "spec_vm": None,
    }
    assert stored["op"][0]["spec_vm"] == "a"
    assert_columns_follow_bodies(store)


def test_status_writes_change_the_fields_that_changed_and_keep_the_others(store: Store) -> None:
    a, b = store.create(vm("a")), store.create(vm("b"))
    a.status.phase, a.status.host = VMPhase.RUNNING, "h1"
    b.status.message = "no field changes"
    [[a], [b]] = store.write_each([StatusWrite([a]), StatusWrite([b])])  # type: ignore[misc]
    assert columns_and_bodies(store)["a"][0]["status_host"] == "h1"
    a.status.host = None  # a field back to nothing
    a = store.update_status(a)
    assert columns_and_bodies(store)["a"][0]["status_host"] is None
    a.spec.run_policy = RunPolicy.ALWAYS_ON
    store.update(a)
    store.mutate(VirtualMachine, "b", lambda v: setattr(v.status, "phase", VMPhase.STOPPED))
    store.delete(VirtualMachine, "b")
    assert columns_and_bodies(store)["a"][0]["spec_run_policy"] == "AlwaysOn"
    assert_columns_follow_bodies(store)


def test_a_deletion_mark_keeps_the_fields(store: Store) -> None:
    kept = vm("kept")
    kept.metadata.finalizers = ["virtplane.io/test"]
    kept.status.host = "h1"
    store.create(kept)
    assert store.delete(VirtualMachine, "kept") is False  # marked only
    assert columns_and_bodies(store)["kept"][0]["status_host"] == "h1"
    assert_columns_follow_bodies(store)


def test_a_rewrite_of_old_bodies_writes_their_fields(store: Store) -> None:
    store.create(vm("old"))
    current = store.get(VirtualMachine, "old").model_dump(mode="json")
    del current["status"]["phase"]  # as an older model wrote it: the current one adds the default
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE objects SET body = :body, status_phase = NULL WHERE name = 'old'"),
            {"body": json.dumps(current)},
        )
        connection.execute(text("DELETE FROM feed_state WHERE name LIKE 'schema:%'"))
    with store.engine.begin() as connection:
        assert normalize_bodies(connection).rewritten[VirtualMachine.KIND] == 1
    assert columns_and_bodies(store)["old"][0]["status_phase"] == VMPhase.PENDING.value
    assert_columns_follow_bodies(store)


def test_sqlite_migration_0004_fills_the_columns_from_the_bodies(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "old.db"))
    config = Config()
    config.set_main_option("script_location", str(Path(virtplane.store.__file__).parent / "migrations"))
    running = vm("running")
    running.status.phase, running.status.host = VMPhase.RUNNING, "h1"
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
        # rows as the code of 0003 wrote them: the database generated the columns
        for obj in (running, vm("off")):
            connection.execute(
                text(
                    "INSERT INTO objects (kind, name, uid, resource_version, generation, body) "
                    "VALUES (:kind, :name, :name, 1, 1, :body)"
                ),
                {"kind": obj.KIND, "name": obj.metadata.name, "body": obj.model_dump_json()},
            )
    store.migrate()
    assert store.schema_revision() == head_revision()
    assert columns_and_bodies(store)["running"][0]["status_host"] == "h1"
    assert_columns_follow_bodies(store)
    store.close()
