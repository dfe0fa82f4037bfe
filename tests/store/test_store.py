from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert, inspect, text

from virtplane.domain.resources import EventType, Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store import AlreadyExists, ChangeFeed, Conflict, NotFound, Store, schema, sqlite_url
from virtplane.store.changes import Change
from virtplane.store.store import MIGRATIONS, head_revision

_BODY = "SELECT body FROM objects WHERE kind = 'VirtualMachine' AND name = :name"
_SET_BODY = "UPDATE objects SET body = :body WHERE kind = 'VirtualMachine' AND name = :name"


def vm(name: str, cpu: int = 1) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(cpu=cpu))


def test_migrations_create_the_schema_on_an_empty_database(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "empty.db"))
    assert store.schema_revision() is None
    store.migrate()
    assert store.schema_revision() == head_revision()
    tables = set(inspect(store.engine).get_table_names())
    assert {"objects", "changes", "events", "tokens", "leases", "alembic_version"} <= tables
    store.migrate()  # idempotent
    assert store.schema_revision() == head_revision()


def test_the_head_revision_is_alembics_and_each_file_is_named_after_its_revision() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    scripts = ScriptDirectory.from_config(config)
    assert head_revision() == scripts.get_current_head()
    for script in scripts.walk_revisions():
        assert script.path is not None and Path(script.path).name.startswith(f"{script.revision}_")


def test_a_start_at_the_head_revision_does_not_load_alembic(tmp_path: Path) -> None:
    """The start-up of a server whose schema is current (row 2 of bench/ counts it)."""
    Store(sqlite_url(tmp_path / "v.db")).migrate()
    program = (
        "import sys; from virtplane.store import Store, sqlite_url; "
        f"Store(sqlite_url({str(tmp_path / 'v.db')!r})).migrate(); "
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('alembic', 'mako')))"
    )
    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_sqlite_runs_in_wal_mode(store: Store) -> None:
    with store.engine.connect() as connection:
        mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
    assert mode == "wal"


def test_create_sets_identity_and_versions(store: Store) -> None:
    created = store.create(vm("web-1"))
    assert created.metadata.uid
    assert created.metadata.generation == 1
    assert created.metadata.resource_version > 0
    assert created.metadata.created_at is not None
    assert store.get(VirtualMachine, "web-1") == created
    with pytest.raises(AlreadyExists):
        store.create(vm("web-1"))


def test_stale_update_is_refused_and_nothing_is_lost(store: Store) -> None:
    first = store.create(vm("web-1"))
    reader_a = store.get(VirtualMachine, "web-1")
    reader_b = store.get(VirtualMachine, "web-1")
    reader_a.spec.cpu = 2
    written = store.update(reader_a)
    assert written.metadata.resource_version > first.metadata.resource_version
    reader_b.spec.cpu = 4
    with pytest.raises(Conflict) as info:
        store.update(reader_b)
    assert "read it again" in str(info.value)
    assert store.get(VirtualMachine, "web-1").spec.cpu == 2


def test_generation_moves_with_spec_only(store: Store) -> None:
    obj = store.create(vm("web-1"))
    obj.status.message = "observed"
    after_status = store.update(obj)
    assert after_status.metadata.generation == 1
    after_status.spec.memory_mib = 1024
    after_spec = store.update(after_status)
    assert after_spec.metadata.generation == 2


def test_an_update_that_changes_nothing_writes_nothing(store: Store) -> None:
    obj = store.create(vm("web-1"))
    before = store.revision()
    same = store.update(obj)
    assert same.metadata.resource_version == obj.metadata.resource_version
    assert store.revision() == before


def test_a_body_stored_before_a_field_existed_is_no_change(store: Store) -> None:
    """A row written by an older schema lacks fields added since (with their defaults): the
    store compares what the API owns in the current schema, so an unchanged object is no
    write and a status write is not taken for a change of the spec (``StatusOnly``)."""
    created = store.create(vm("web-1"))
    with store.engine.begin() as connection:
        body = json.loads(connection.execute(text(_BODY), {"name": "web-1"}).scalar_one())
        del body["spec"]["termination_grace_period_s"], body["status"]["message"]
        connection.execute(text(_SET_BODY), {"name": "web-1", "body": json.dumps(body)})
    before = store.revision()
    same = store.update_status(store.get(VirtualMachine, "web-1"))
    assert store.revision() == before
    assert same.metadata.resource_version == created.metadata.resource_version


def test_identity_and_versions_are_the_stores_whatever_the_writer_sends(store: Store) -> None:
    created = store.create(vm("web-1"))
    edited = created.model_copy(deep=True)
    edited.metadata.uid = "forged"
    edited.metadata.generation = 7
    edited.metadata.created_at = datetime(2000, 1, 1, tzinfo=UTC)
    edited.status.message = "observed"
    written = store.update(edited)
    assert written.metadata.uid == created.metadata.uid
    assert written.metadata.generation == created.metadata.generation
    assert written.metadata.created_at == created.metadata.created_at
    assert written.metadata.resource_version > created.metadata.resource_version
    assert written.metadata.updated_at is not None and created.metadata.updated_at is not None
    assert written.metadata.updated_at > created.metadata.updated_at
    assert edited.metadata.uid == "forged", "the caller's object is left as it was"
    written.status.message = "changed after the write"
    assert store.get(VirtualMachine, "web-1").status.message == "observed"
    assert edited.status.message == "observed"


def test_concurrent_writers_one_wins_per_version(store: Store) -> None:
    store.create(vm("web-1"))
    results: list[str] = []
    barrier = threading.Barrier(8)

    def writer(cpu: int) -> None:
        obj = store.get(VirtualMachine, "web-1")
        barrier.wait()
        obj.spec.cpu = cpu
        try:
            store.update(obj)
            results.append("ok")
        except Conflict:
            results.append("conflict")

    threads = [threading.Thread(target=writer, args=(i + 2,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1
    assert results.count("conflict") == 7


def test_mutate_retries_on_conflict(store: Store) -> None:
    store.create(vm("web-1"))
    calls = 0

    def bump(obj: VirtualMachine) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:  # someone else writes between our read and our write
            other = store.get(VirtualMachine, "web-1")
            other.metadata.labels["x"] = "y"
            store.update(other)
        obj.spec.cpu += 1

    result = store.mutate(VirtualMachine, "web-1", bump)
    assert calls == 2
    assert result.spec.cpu == 2
    assert result.metadata.labels == {"x": "y"}


def test_delete_honours_finalizers(store: Store) -> None:
    obj = vm("web-1")
    obj.metadata.finalizers = ["virtplane.io/domain"]
    store.create(obj)
    assert store.delete(VirtualMachine, "web-1") is False
    marked = store.get(VirtualMachine, "web-1")
    assert marked.metadata.deletion_requested_at is not None
    marked.metadata.finalizers = []
    store.update(marked)
    assert store.delete(VirtualMachine, "web-1") is True
    with pytest.raises(NotFound):
        store.get(VirtualMachine, "web-1")


def test_change_feed_lists_every_write_in_order(store: Store) -> None:
    start = store.revision()
    obj = store.create(vm("a"))
    obj.spec.cpu = 3
    store.update(obj)
    store.create(vm("b"))
    store.delete(VirtualMachine, "a")
    changes = store.changes_since(start)
    assert [(c.name, c.op) for c in changes] == [
        ("a", "added"),
        ("a", "modified"),
        ("b", "added"),
        ("a", "deleted"),
    ]
    assert [c.revision for c in changes] == sorted(c.revision for c in changes)
    assert store.changes_since(changes[1].revision)[0].name == "b"


def test_a_pump_delivers_every_batch_and_asks_no_more_after_a_partial_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = ChangeFeed(store, batch=2)
    feed.revision = store.revision()
    delivered: list[list[str]] = []
    feed.subscribe(lambda changes: delivered.append([c.name for c in changes]))
    for name in "abcde":
        store.create(vm(name))
    asked: list[int] = []
    changes_since = store.changes_since

    def spy(revision: int, limit: int = 5000) -> list[Change]:
        asked.append(revision)
        return changes_since(revision, limit)

    monkeypatch.setattr(store, "changes_since", spy)
    assert feed.pump() == 5
    assert delivered == [["a", "b"], ["c", "d"], ["e"]]
    assert len(asked) == 3  # the third answer was short: that was all
    assert feed.pump() == 0 and delivered[-1] == ["e"]


def test_listeners_hear_each_commit(store: Store) -> None:
    heard: list[int] = []
    store.add_listener(heard.append)
    store.create(vm("a"))
    store.create(vm("b"))
    assert len(heard) == 2 and heard[0] < heard[1]


def test_events_are_appended_and_filtered(store: Store) -> None:
    store.record_event("VirtualMachine", "a", "Started", "one")
    store.record_event("VirtualMachine", "b", "Started", "two")
    store.record_event("VirtualMachine", "a", "Crashed", "three", EventType.WARNING)
    events = store.list_events(kind="VirtualMachine", name="a")
    assert [e.reason for e in events] == ["Started", "Crashed"]
    assert events[1].type is EventType.WARNING
    assert [e.message for e in store.list_events(limit=2)] == ["two", "three"]
    assert [e.message for e in store.list_events(after_id=events[0].id)] == ["two", "three"]


def test_an_events_time_is_stored_as_sqlalchemy_stores_a_time(store: Store) -> None:
    """Events are inserted on the driver's cursor: the time goes through the column type's own
    conversion, so it reads back as written, in the form a time written by SQLAlchemy has."""
    before = datetime.now(UTC)
    store.record_event("VirtualMachine", "a", "Started", "one")
    after = datetime.now(UTC)
    [written] = store.list_events()
    assert before <= written.time <= after
    with store.engine.begin() as connection:
        connection.execute(
            insert(schema.events).values(
                time=written.time, kind="VirtualMachine", name="a", type="Normal", reason="Same", message=""
            )
        )
        stored = connection.exec_driver_sql("SELECT DISTINCT CAST(time AS TEXT) FROM events").scalars().all()
    assert len(stored) == 1, stored


def test_tokens_are_stored_hashed(store: Store) -> None:
    token = store.create_token("ops", "operator")
    assert store.token_role(token) == ("ops", "operator")
    assert store.token_role(token + "x") is None
    with store.engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT token_sha256 FROM tokens").scalars().all()
    assert token not in stored


def test_claims_are_written_with_their_holder_or_not_at_all(store: Store) -> None:
    from virtplane.domain.ipam import Claim
    from virtplane.store.claims import ClaimTaken

    ip = Claim("ip/lan", "10.0.0.2")
    first = store.create(VirtualMachine(metadata=Metadata(name="a")), claims=[ip])
    with pytest.raises(ClaimTaken, match="VirtualMachine a"):
        store.create(
            VirtualMachine(metadata=Metadata(name="b")), claims=[Claim("mac", "52:54:00:00:00:01"), ip]
        )
    assert store.find(VirtualMachine, "b") is None
    assert [c for c, _ in store.claims("")] == [ip]  # b's MAC was not kept either
    # an update replaces the holder's claims in its transaction; deletion releases them
    store.update(first, claims=[Claim("ip/lan", "10.0.0.3")])
    assert [(c.value, h.name) for c, h in store.claims("ip/")] == [("10.0.0.3", "a")]
    store.delete(VirtualMachine, "a")
    assert store.claims("") == []
