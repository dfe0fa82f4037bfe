"""The store on PostgreSQL with several replicas: what SQLite's single writer never tests.

Every test gets a fresh, empty schema (tests/postgres/pg.py). "Replicas" are separate
Store objects (separate connection pools) on that schema, written to from threads.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC
from urllib.parse import quote

import pytest
from sqlalchemy import inspect, text

from tests.postgres.pg import schema_url
from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.store import AlreadyExists, ChangeFeed, Conflict, Store
from virtplane.store.upgrade import head_revision

pytestmark = pytest.mark.postgres


def vm(name: str, cpu: int = 1) -> VirtualMachine:
    return VirtualMachine(metadata=Metadata(name=name), spec=VirtualMachineSpec(cpu=cpu))


@pytest.fixture
def url() -> Iterator[str]:
    with schema_url() as u:
        yield u


@pytest.fixture
def replicas(url: str) -> Iterator[list[Store]]:
    """Three replicas on one migrated schema."""
    stores = [Store(url) for _ in range(3)]
    stores[0].migrate()
    yield stores
    for s in stores:
        s.close()


def run_threads(target: Callable[[int], None], count: int) -> None:
    """Run ``target(i)`` for i in range(count) in threads released together; re-raise their errors."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:  # wrapped: a SystemExit from a thread must fail the test, not end the run
        raise AssertionError(f"{len(errors)} thread(s) failed, the first with {errors[0]!r}") from errors[0]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll until ``condition`` holds; the deadline only guards against a hang."""
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.005)


# ---------------------------------------------------------------------- migrations


def test_migrations_create_the_schema_on_an_empty_database(url: str) -> None:
    store = Store(url)
    try:
        assert store.schema_revision() is None
        store.migrate()
        assert store.schema_revision() == head_revision()
        tables = set(inspect(store.engine).get_table_names())
        assert {"objects", "changes", "events", "tokens", "leases", "alembic_version"} <= tables
        store.migrate()  # idempotent
        assert store.schema_revision() == head_revision()
    finally:
        store.close()


def test_replicas_starting_together_migrate_once(url: str) -> None:
    stores = [Store(url) for _ in range(4)]
    try:
        run_threads(lambda i: stores[i].migrate(), len(stores))
        assert all(s.schema_revision() == head_revision() for s in stores)
        stores[0].create(vm("web-1"))
        assert stores[3].get(VirtualMachine, "web-1").spec.cpu == 1
    finally:
        for s in stores:
            s.close()


# ---------------------------------------------------------------------- optimistic concurrency


def test_replicas_racing_on_one_version_one_wins(replicas: list[Store]) -> None:
    replicas[0].create(vm("web-1"))
    reads = [replicas[i % 3].get(VirtualMachine, "web-1") for i in range(12)]
    results: list[str] = []

    def write(i: int) -> None:
        reads[i].spec.cpu = i + 2
        try:
            replicas[i % 3].update(reads[i])
            results.append(f"ok {i + 2}")
        except Conflict:
            results.append("conflict")

    run_threads(write, len(reads))
    winners = [r for r in results if r.startswith("ok")]
    assert len(winners) == 1 and results.count("conflict") == 11
    assert f"ok {replicas[1].get(VirtualMachine, 'web-1').spec.cpu}" == winners[0]


def test_replicas_racing_to_delete_one_version_one_wins(replicas: list[Store]) -> None:
    created = replicas[0].create(vm("web-1"))
    outcomes: list[str] = []

    def remove(i: int) -> None:
        try:
            replicas[i % 3].delete(
                VirtualMachine, "web-1", expected_version=created.metadata.resource_version
            )
            outcomes.append("deleted")
        except Conflict:
            outcomes.append("conflict")
        except Exception as e:  # NotFound: the row was gone when it looked
            outcomes.append(type(e).__name__)

    run_threads(remove, 6)
    assert outcomes.count("deleted") == 1
    assert replicas[2].find(VirtualMachine, "web-1") is None


def test_mutate_from_many_replicas_loses_no_update(replicas: list[Store]) -> None:
    replicas[0].create(vm("counter", cpu=1))

    def bump(obj: VirtualMachine) -> None:
        obj.spec.cpu += 1

    def work(i: int) -> None:
        for _ in range(15):
            replicas[i % 3].mutate(VirtualMachine, "counter", bump, attempts=1000)

    run_threads(work, 6)
    final = replicas[2].get(VirtualMachine, "counter")
    assert final.spec.cpu == 1 + 6 * 15
    assert final.metadata.generation == 1 + 6 * 15


def test_replicas_creating_one_name_one_wins(replicas: list[Store]) -> None:
    outcomes: list[str] = []

    def create(i: int) -> None:
        try:
            replicas[i % 3].create(vm("web-1", cpu=i + 1))
            outcomes.append("created")
        except AlreadyExists:
            outcomes.append("exists")

    run_threads(create, 9)
    assert outcomes.count("created") == 1 and outcomes.count("exists") == 8
    assert [c.op for c in replicas[0].changes_since(0)] == ["added"]


def test_replicas_creating_one_token_name_one_wins(replicas: list[Store]) -> None:
    outcomes: list[str] = []

    def create(i: int) -> None:
        try:
            replicas[i % 3].create_token("ops", "operator")
            outcomes.append("created")
        except AlreadyExists:
            outcomes.append("exists")

    run_threads(create, 6)
    assert outcomes.count("created") == 1


# ---------------------------------------------------------------------- change feed order


def advisory_waiters(store: Store, application_name: str) -> int:
    with store.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = :name"
                ),
                {"name": application_name},
            ).scalar_one()
        )


def test_a_revision_that_commits_late_is_not_skipped_by_the_feed(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer 1 has drawn its revision but not committed; writer 2 comes along.

    If writer 2 could draw a higher revision and commit first, a reader would see it,
    move past it, and never deliver writer 1's lower revision. Writer 2 must wait.
    """
    second_name = f"vp-second-{uuid.uuid4().hex[:8]}"
    slow, reader = Store(url), Store(url)
    second = Store(f"{url}&application_name={quote(second_name)}")
    try:
        slow.migrate()
        start = reader.revision()
        drew_revision, may_commit = threading.Event(), threading.Event()
        original = slow._record_change

        def record_then_hold(*args: str) -> int:
            revision = original(*args)  # type: ignore[arg-type]
            drew_revision.set()
            may_commit.wait(30)
            return revision

        monkeypatch.setattr(slow, "_record_change", record_then_hold)
        delivered: list[int] = []
        feed = ChangeFeed(reader)
        feed.revision = start
        feed.subscribe(lambda changes: delivered.extend(c.revision for c in changes))

        first = threading.Thread(target=slow.create, args=(vm("slow"),))
        first.start()
        assert drew_revision.wait(30)
        second_done = threading.Event()

        def second_writer() -> None:
            second.create(vm("fast"))
            second_done.set()

        other = threading.Thread(target=second_writer)
        other.start()
        wait_for(
            lambda: second_done.is_set() or advisory_waiters(reader, second_name) > 0,
            "the second writer to commit or to queue behind the first",
        )
        feed.pump()  # while writer 1 is still open
        assert delivered == []
        may_commit.set()
        first.join()
        other.join()
        feed.pump()
        committed = [c.revision for c in reader.changes_since(start)]
        assert [c.name for c in reader.changes_since(start)] == ["slow", "fast"]
        assert delivered == committed
    finally:
        for s in (slow, second, reader):
            s.close()


def test_the_feed_misses_no_change_under_concurrent_writers(replicas: list[Store], url: str) -> None:
    reader = Store(url)
    feed = ChangeFeed(reader, batch=7)
    delivered: list[int] = []
    feed.subscribe(lambda changes: delivered.extend(c.revision for c in changes))
    writers_done = threading.Event()

    def follow() -> None:
        while not writers_done.is_set():
            feed.pump()
        feed.pump()

    follower = threading.Thread(target=follow)
    follower.start()

    def bump(obj: VirtualMachine) -> None:
        obj.spec.cpu += 1

    def write(i: int) -> None:
        store = replicas[i % 3]
        store.create(vm(f"vm-{i}"))
        for n in range(20):
            store.mutate(VirtualMachine, f"vm-{i}" if n % 2 else "shared", bump, attempts=1000)

    try:
        replicas[0].create(vm("shared"))
        run_threads(write, 6)
    finally:
        writers_done.set()
        follower.join()
        reader.close()
    committed = [c.revision for c in replicas[0].changes_since(0)]
    assert len(committed) == 1 + 6 * 21
    assert delivered == committed  # every one, in order, none twice
    assert replicas[1].get(VirtualMachine, "shared").spec.cpu == 1 + 6 * 10


def test_event_followers_miss_no_event_under_concurrent_writers(replicas: list[Store]) -> None:
    seen: list[int] = []
    writers_done = threading.Event()

    def follow() -> None:
        while True:
            done = writers_done.is_set()
            after = seen[-1] if seen else 0
            seen.extend(e.id for e in replicas[2].list_events(after_id=after, limit=1000))
            if done:
                return

    follower = threading.Thread(target=follow)
    follower.start()

    def write(i: int) -> None:
        for n in range(25):
            replicas[i % 3].record_event("VirtualMachine", f"vm-{i}", "Tick", str(n))

    try:
        run_threads(write, 6)
    finally:
        writers_done.set()
        follower.join()
    everything = [e.id for e in replicas[0].list_events(limit=10_000)]
    assert len(everything) == 150
    assert seen == everything


# ---------------------------------------------------------------------- time zones


def test_times_come_back_as_utc_whatever_the_session_time_zone() -> None:
    with schema_url(settings={"timezone": "Pacific/Auckland"}) as url:
        store = Store(url)
        try:
            store.migrate()
            with store.engine.connect() as connection:
                assert connection.execute(text("SHOW timezone")).scalar_one() == "Pacific/Auckland"
            store.record_event("VirtualMachine", "a", "Started")
            (event,) = store.list_events()
            assert event.time.utcoffset() is not None and event.time.tzinfo == UTC
            from virtplane.store import utcnow

            assert abs((utcnow() - event.time).total_seconds()) < 3600
            now = utcnow()
            assert store.try_acquire_lease("l", "me", now, 15)
            lease = store.lease("l")
            assert lease is not None and lease[1].tzinfo == UTC
            assert (lease[1] - now).total_seconds() == 15
        finally:
            store.close()
