"""SQLite's connections are kept open between calls (``HeldConnections``): reused, and never
left holding an old snapshot of the file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import event, text

from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store import Conflict, Store, sqlite_url

_SET_BODY = "UPDATE objects SET body = :body WHERE kind = 'VirtualMachine' AND name = :name"


def vm(name: str, cpu: int = 1) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(cpu=cpu))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "held.db"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    s = Store(sqlite_url(path))
    s.migrate()
    yield s
    s.close()


def _count_opened(store: Store) -> list[int]:
    opened = [0]

    def on_connect(*_: object) -> None:
        opened[0] += 1

    event.listen(store.engine, "connect", on_connect)
    return opened


def test_reads_and_writes_reuse_one_connection(store: Store) -> None:
    store.close()  # start from no open connection, counting
    opened = _count_opened(store)
    written = store.create(vm("web-1"))
    for cpu in range(2, 12):
        store.get(VirtualMachine, "web-1")
        written.status.message = f"look {cpu}"
        written = store.update_status(written)
        store.changes_since(0)
    assert opened[0] == 1


def test_a_lost_race_gives_its_connection_back(store: Store) -> None:
    store.close()
    opened = _count_opened(store)
    stale = store.create(vm("web-1"))
    fresh = store.get(VirtualMachine, "web-1")
    fresh.status.message = "first"
    store.update_status(fresh)
    for attempt in range(5):
        stale.status.message = f"late {attempt}"
        with pytest.raises(Conflict):
            store.update_status(stale)
    assert opened[0] == 1


def test_concurrent_readers_each_get_their_own_connection(store: Store) -> None:
    """As many as there are threads (the API's pool has 40): no bound of SQLAlchemy's pool
    (5 + 10 overflow) counts the held connections against later readers."""
    readers = 20
    inside = threading.Barrier(readers)
    seen: list[int] = []

    def reader() -> None:
        with store.connect() as connection:
            seen.append(id(connection))
            inside.wait(timeout=10)  # all of them hold a connection at once

    for _ in range(2):
        threads = [threading.Thread(target=reader) for _ in range(readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(seen) == 2 * readers
    assert len(set(seen)) == readers  # the second round reused the first's


def test_a_read_that_failed_half_way_is_not_reused_with_its_old_snapshot(store: Store, path: Path) -> None:
    """A list that raised on its second body left its statement open (the exception's
    traceback holds the half-read result): that connection still reads the file as it was.
    Handed to the next reader, it would not see a later write of another process."""
    for name in ("a", "b", "c"):
        store.create(vm(name))
    other = Store(sqlite_url(path))  # another process's connections to the same file
    try:
        with other.engine.begin() as connection:
            connection.execute(text(_SET_BODY), {"body": '{"metadata": {}}', "name": "b"})
        with pytest.raises(ValidationError) as failed:
            store.list_objects(VirtualMachine)
        a = other.get(VirtualMachine, "a")
        a.status.message = "written elsewhere"
        other.update_status(a)
    finally:
        other.close()
    assert store.get(VirtualMachine, "a").status.message == "written elsewhere"
    assert failed.value  # the half-read result stayed alive until here


def test_closing_the_store_closes_a_connection_in_use_when_its_reader_is_done(store: Store) -> None:
    store.create(vm("web-1"))
    with store.connect() as in_use:
        store.close()
        assert not in_use.closed  # its reader goes on
        assert in_use.exec_driver_sql("SELECT count(*) FROM objects").scalar() == 1
    assert in_use.closed
    assert store.get(VirtualMachine, "web-1").metadata.name == "web-1"  # usable again: a new one
