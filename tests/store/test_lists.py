"""Paged, filtered lists and watch reads (virtplane.store.lists), on SQLite and PostgreSQL.

The selector table is the contract of label and field selection in SQL: each row names
the objects it must select out of one seeded fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

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
from virtplane.domain.selectors import parse_field_selector, parse_label_selector, selectable_fields
from virtplane.store import Store, sqlite_url
from virtplane.store.lists import (
    current_objects,
    events_after,
    events_before,
    kind_changes,
    last_event_id,
    list_page,
)

VM = VirtualMachine.KIND
LONG_A = "a" * 300 + "-one"
LONG_B = "a" * 300 + "-two"  # the same first 200 characters: only the full value tells them apart

# name, labels, run policy, phase, host
FLEET = [
    ("web-1", {"app": "web", "tier": "front", "canary": ""}, RunPolicy.ALWAYS_ON, VMPhase.RUNNING, "h1"),
    ("web-2", {"app": "web", "tier": "front"}, RunPolicy.ALWAYS_ON, VMPhase.RUNNING, "h2"),
    ("db-1", {"app": "db", "example.com/team": "data"}, RunPolicy.MANUAL, VMPhase.STOPPED, "h1"),
    ("cache-1", {"app": "cache", "note": LONG_A}, RunPolicy.MANUAL, VMPhase.RUNNING, "h2"),
    ("cache-2", {"note": LONG_B}, RunPolicy.ALWAYS_OFF, VMPhase.PENDING, None),
    ("bare-1", {}, RunPolicy.MANUAL, VMPhase.STOPPED, None),
]


def seed(store: Store) -> None:
    for name, labels, policy, phase, host in FLEET:
        store.create(
            VirtualMachine(
                metadata=Metadata(name=name, labels=labels), spec=VirtualMachineSpec(run_policy=policy)
            )
        )
        current = store.get(VirtualMachine, name)
        current.status.phase = phase
        current.status.host = host
        store.update(current)


def names(store: Store, labels: str = "", fields: str = "", kind: str = VM, limit: int = 100) -> list[str]:
    page = list_page(
        store,
        kind,
        limit=limit,
        labels=parse_label_selector(labels),
        fields=parse_field_selector(fields, selectable_fields(VirtualMachine)),
    )
    return [VirtualMachine.model_validate_json(body).metadata.name for body in page.bodies]


SELECTIONS = [
    ("", "", ["bare-1", "cache-1", "cache-2", "db-1", "web-1", "web-2"]),
    ("app=web", "", ["web-1", "web-2"]),
    ("app==web", "", ["web-1", "web-2"]),
    ("app!=web", "", ["bare-1", "cache-1", "cache-2", "db-1"]),  # no label counts as "not web"
    ("app in (web,db)", "", ["db-1", "web-1", "web-2"]),
    ("app notin (web,db)", "", ["bare-1", "cache-1", "cache-2"]),
    ("app", "", ["cache-1", "db-1", "web-1", "web-2"]),
    ("!app", "", ["bare-1", "cache-2"]),
    ("canary", "", ["web-1"]),
    ("canary=", "", ["web-1"]),  # the empty value
    ("app=web,tier=front,!canary", "", ["web-2"]),
    ("example.com/team=data", "", ["db-1"]),
    (f"note={LONG_A}", "", ["cache-1"]),
    (f"note={LONG_B}", "", ["cache-2"]),
    ("app=nothing", "", []),
    ("", "status.phase=Running", ["cache-1", "web-1", "web-2"]),
    ("", "status.phase!=Running", ["bare-1", "cache-2", "db-1"]),
    ("", "status.host=h1", ["db-1", "web-1"]),
    ("", "status.host=", ["bare-1", "cache-2"]),  # no host
    ("", "status.host!=", ["cache-1", "db-1", "web-1", "web-2"]),
    ("", "status.host!=h1", ["bare-1", "cache-1", "cache-2", "web-2"]),
    ("", "spec.run_policy=Manual", ["bare-1", "cache-1", "db-1"]),
    ("", "metadata.name=db-1", ["db-1"]),
    ("", "status.phase=Running,status.host=h2", ["cache-1", "web-2"]),
    ("app=web", "status.host=h2", ["web-2"]),
    ("app!=web", "spec.run_policy!=Manual", ["cache-2"]),
]


@pytest.mark.parametrize(("labels", "fields", "expected"), SELECTIONS)
def test_selectors_select_in_sql(store: Store, labels: str, fields: str, expected: list[str]) -> None:
    seed(store)
    assert names(store, labels, fields) == expected


def test_field_selectors_of_operations_name_their_vm(store: Store) -> None:
    seed(store)
    for vm_name, kind in (("web-1", OperationType.RESTART), ("db-1", OperationType.START)):
        store.create(
            VirtualMachineOperation(
                metadata=Metadata(name=f"{vm_name}-op"),
                spec=VirtualMachineOperationSpec(vm=vm_name, type=kind),
            )
        )
    fields = parse_field_selector("spec.vm=db-1", selectable_fields(VirtualMachineOperation))
    page = list_page(store, VirtualMachineOperation.KIND, limit=10, fields=fields)
    assert [VirtualMachineOperation.model_validate_json(b).metadata.name for b in page.bodies] == ["db-1-op"]


def test_the_label_index_follows_every_write(store: Store) -> None:
    seed(store)
    web = store.get(VirtualMachine, "web-2")
    web.metadata.labels = {"app": "db"}
    store.update(web)
    assert names(store, "app=db") == ["db-1", "web-2"]
    assert names(store, "tier=front") == ["web-1"]

    web = store.get(VirtualMachine, "web-2")
    web.status.message = "a status write keeps the labels"
    store.update(web)
    assert names(store, "app=db") == ["db-1", "web-2"]

    store.delete(VirtualMachine, "web-2")
    assert names(store, "app=db") == ["db-1"]
    store.create(VirtualMachine(metadata=Metadata(name="web-2", labels={"app": "new"})))
    assert names(store, "app=new") == ["web-2"]
    assert names(store, "app=db") == ["db-1"]


def test_pages_cover_the_kind_once_in_name_order(store: Store) -> None:
    for i in range(7):
        store.create(VirtualMachine(metadata=Metadata(name=f"vm-{i}")))
    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        page = list_page(store, VM, limit=3, after=after)
        pages += 1
        seen += [VirtualMachine.model_validate_json(b).metadata.name for b in page.bodies]
        if page.last_name is None:
            break
        after = page.last_name
        if pages == 1:  # writes between pages: what exists throughout is neither skipped nor repeated
            store.create(VirtualMachine(metadata=Metadata(name="a-1")))  # sorts before the cursor
            store.create(VirtualMachine(metadata=Metadata(name="vm-2x")))  # after it: shows up
            store.delete(VirtualMachine, "vm-5")  # gone before its page
    assert seen == ["vm-0", "vm-1", "vm-2", "vm-2x", "vm-3", "vm-4", "vm-6"]
    assert pages == 3


def test_a_page_with_a_selector_stops_at_the_limit_and_continues(store: Store) -> None:
    for i in range(9):
        store.create(VirtualMachine(metadata=Metadata(name=f"vm-{i}", labels={"odd": str(i % 2)})))
    odd = parse_label_selector("odd=1")
    first = list_page(store, VM, limit=2, labels=odd)
    assert first.last_name == "vm-3"
    second = list_page(store, VM, limit=2, after=first.last_name, labels=odd)
    assert [VirtualMachine.model_validate_json(b).metadata.name for b in second.bodies] == ["vm-5", "vm-7"]
    assert second.last_name is None


def test_current_objects_say_whether_each_matches(store: Store) -> None:
    seed(store)
    found = current_objects(store, VM, ["web-1", "db-1", "gone"], labels=parse_label_selector("app=web"))
    assert set(found) == {"web-1", "db-1"}
    assert found["web-1"].matches and not found["db-1"].matches
    assert all(c.matches for c in current_objects(store, VM, ["web-1", "db-1"]).values())


def test_kind_changes_and_the_compaction_horizon(store: Store) -> None:
    start = store.revision()
    store.create(VirtualMachine(metadata=Metadata(name="a")))
    store.create_token("someone", "viewer")  # not a change
    store.create(
        VirtualMachineOperation(
            metadata=Metadata(name="op"), spec=VirtualMachineOperationSpec(vm="a", type=OperationType.START)
        )
    )
    store.delete(VirtualMachine, "a")
    top = store.revision()
    changes = kind_changes(store, VM, after=start, upto=top, limit=10)
    assert [(c.name, c.op) for c in changes] == [("a", "added"), ("a", "deleted")]
    assert kind_changes(store, VM, after=start, upto=changes[0].revision, limit=10) == changes[:1]

    assert store.compacted_revision() == 0
    store.compact_changes(keep_last=1)
    assert store.compacted_revision() == top - 1
    store.compact_changes(keep_last=5)  # never moves back
    assert store.compacted_revision() == top - 1


def test_events_page_backwards_and_follow_forwards(store: Store) -> None:
    assert last_event_id(store) == 0
    for i in range(5):
        store.record_event(VM, f"vm-{i % 2}", f"R{i}")
    newest, older = events_before(store, before=None, limit=2)
    assert [e.reason for e in newest] == ["R3", "R4"] and older
    rest, older = events_before(store, before=newest[0].id, limit=10)
    assert [e.reason for e in rest] == ["R0", "R1", "R2"] and not older
    assert [e.reason for e in events_before(store, before=None, limit=10, name="vm-1")[0]] == ["R1", "R3"]
    assert [e.reason for e in events_after(store, after=rest[0].id, limit=2)] == ["R1", "R2"]
    assert last_event_id(store) == newest[-1].id


def test_sqlite_migration_indexes_the_labels_of_existing_objects(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "old.db"))
    config = Config()
    config.set_main_option("script_location", str(Path(virtplane.store.__file__).parent / "migrations"))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        old = VirtualMachine(metadata=Metadata(name="old-1", labels={"app": "web"}))
        connection.execute(  # as the code of 0001 wrote it
            text(
                "INSERT INTO objects (kind, name, uid, resource_version, generation, body) "
                "VALUES ('VirtualMachine', 'old-1', 'u1', 1, 1, :body)"
            ),
            {"body": old.model_dump_json()},
        )
    store.migrate()
    assert names(store, "app=web") == ["old-1"]
    with store.engine.connect() as connection:
        plan = " ".join(
            str(row)
            for row in connection.execute(
                text(
                    "EXPLAIN QUERY PLAN SELECT name FROM objects WHERE kind = 'VirtualMachine' "
                    "AND status_host = 'h1' AND name > '' ORDER BY name LIMIT 3"
                )
            )
        )
    assert "ix_objects_status_host" in plan
    store.close()


def test_a_long_field_value_never_fails_a_write(store: Store) -> None:
    """The field columns take any value the body has (status.host is not length-checked)."""
    store.create(VirtualMachine(metadata=Metadata(name="far")))
    current = store.get(VirtualMachine, "far")
    current.status.host = "h" * 1000
    store.update(current)
    assert names(store, fields=f"status.host={'h' * 1000}") == ["far"]
