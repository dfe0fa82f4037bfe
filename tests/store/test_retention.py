"""Retention in the store: the change feed and the events pruned by age (the store's clock, moved
by the test) and by count, and SQLite's file handing the pages back."""

from __future__ import annotations

import logging
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import WallClock
from virtplane.domain.resources import EventType, Metadata, Secret, SecretSpec
from virtplane.runtime.retention import Limits, prune, vacuum_once_at_start
from virtplane.store import Store, sqlite_url
from virtplane.store.settings import Settings

HOUR = 3600.0
NORMAL = EventType.NORMAL


def secret(name: str) -> Secret:
    return Secret(metadata=Metadata(name=name), spec=SecretSpec(username="u", password="p"))


def writes(store: Store, prefix: str, count: int) -> int:
    """``count`` changes (creates); the revision after them."""
    for i in range(count):
        store.create(secret(f"{prefix}-{i}"))
    return store.revision()


def test_changes_older_than_the_retention_go_once_a_mark_after_them_is_that_old(store: Store) -> None:
    clock = WallClock()
    store.clock = clock
    first = writes(store, "a", 5)
    assert store.prune_changes(max_age_s=HOUR, max_rows=1000) == 0  # marks the time of revision `first`
    clock.advance(HOUR / 2)
    second = writes(store, "b", 5)
    assert store.prune_changes(max_age_s=HOUR, max_rows=1000) == 0  # too young: nothing goes
    clock.advance(HOUR / 2 + 1)  # the first mark is an hour old, the second half an hour
    writes(store, "c", 5)
    assert store.prune_changes(max_age_s=HOUR, max_rows=1000) == first
    assert store.compacted_revision() == first
    assert [c.revision for c in store.changes_since(first)][:5] == list(range(first + 1, second + 1))
    clock.advance(HOUR / 2)
    store.prune_changes(max_age_s=HOUR, max_rows=1000)
    assert store.compacted_revision() == second  # the changes up to the second mark, a little later


def test_only_the_newest_max_rows_changes_are_kept_and_the_horizon_says_so(store: Store) -> None:
    top = writes(store, "a", 30)
    assert store.prune_changes(max_age_s=HOUR, max_rows=10, batch=7) == top - 10  # in batches
    assert store.compacted_revision() == top - 10
    assert [c.revision for c in store.changes_since(top - 10)] == list(range(top - 9, top + 1))
    assert store.prune_changes(max_age_s=HOUR, max_rows=10) == 0
    store.compact_changes(keep_last=20)  # never moves back
    assert store.compacted_revision() == top - 10


def test_a_change_a_local_reader_has_not_read_stays(store: Store) -> None:
    top = writes(store, "a", 30)
    store.prune_changes(max_age_s=HOUR, max_rows=10, keep_after=5)
    assert store.compacted_revision() == 5
    assert store.changes_since(5)[0].revision == 6 and store.revision() == top


def test_events_go_by_age_and_by_count_oldest_first(store: Store) -> None:
    clock = WallClock()
    store.clock = clock
    store.record_events([("Secret", "old", f"Old{i}", "", NORMAL) for i in range(5)])
    clock.advance(2 * HOUR)
    store.record_events([("Secret", "new", f"New{i}", "", NORMAL) for i in range(5)])
    assert store.prune_events(max_age_s=HOUR, max_rows=1000, batch=2) == 5
    assert [e.reason for e in store.list_events()] == [f"New{i}" for i in range(5)]
    assert store.prune_events(max_age_s=HOUR, max_rows=3, batch=2) == 2
    assert [e.reason for e in store.list_events()] == ["New2", "New3", "New4"]
    assert store.prune_events(max_age_s=HOUR, max_rows=3) == 0


def test_sqlite_a_new_database_hands_back_the_pages_pruning_empties(store: Store) -> None:
    assert store.uses_incremental_vacuum()
    note = "x" * 2000
    store.record_events([("Secret", f"s-{i}", "Big", note, NORMAL) for i in range(2000)])
    full = store.size_bytes()
    pruned = prune(store, Limits(HOUR, 100, HOUR, 100))
    assert pruned.events == 1900 and pruned.pages > 0
    assert store.size_bytes() < full / 4


def test_sqlite_the_file_stops_growing_once_retention_applies(store: Store) -> None:
    """A loop of creates, status writes, deletes and events, a simulated hour apart: the page
    count stops growing once the oldest rows are past the retention."""
    clock = WallClock()
    store.clock = clock
    limits = Limits(2 * HOUR, 100_000, 2 * HOUR, 100_000)
    sizes = []
    for hour in range(16):
        for i in range(40):
            obj = store.create(
                secret(f"h{hour}-{i}"), events=[("Secret", f"h{hour}-{i}", "Made", "y" * 300, NORMAL)]
            )
            obj.metadata.labels = {"v": "2"}
            store.update(obj)
            store.delete(Secret, obj.metadata.name)
        prune(store, limits)
        sizes.append(store.size_bytes())
        clock.advance(HOUR)
    # without pruning each hour adds 5-6 pages; after the first hours, none (page reuse jitters by one)
    assert sizes[-1] - sizes[5] <= 2 * 4096, sizes


def test_sqlite_a_database_made_before_retention_is_vacuumed_once_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.db"
    old = Store(sqlite_url(path))
    old.migrate()
    with old.connect() as connection:  # as a database made before retention: auto_vacuum NONE
        raw = connection.connection.dbapi_connection
        assert raw is not None
        raw.executescript("PRAGMA auto_vacuum=NONE; VACUUM")
    assert not old.uses_incremental_vacuum()
    old.close()
    store = Store(sqlite_url(path))
    try:
        with caplog.at_level(logging.INFO, logger="virtplane.retention"):
            assert vacuum_once_at_start(store, Settings(store))
        assert store.uses_incremental_vacuum()
        assert "one full VACUUM" in caplog.text
        assert not vacuum_once_at_start(store, Settings(store))  # once
    finally:
        store.close()


def test_sqlite_a_vacuum_that_cannot_run_is_logged_and_the_server_starts_anyway(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.db"
    store = Store(sqlite_url(path))
    store.migrate()
    with store.connect() as connection:  # made before retention, and its one connection waits briefly
        raw = connection.connection.dbapi_connection
        assert raw is not None
        raw.executescript("PRAGMA auto_vacuum=NONE; VACUUM; PRAGMA busy_timeout=50")
    other = sqlite3.connect(path, isolation_level=None)  # another process writing meanwhile
    other.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger="virtplane.retention"):
            assert not vacuum_once_at_start(store, Settings(store))
        assert "could not prune and VACUUM" in caplog.text and "locked" in caplog.text
        assert not store.uses_incremental_vacuum()
    finally:
        other.rollback()
        other.close()
        store.close()


def test_pruning_everything_keeps_the_newest_change_and_event_so_that_numbers_go_on(store: Store) -> None:
    clock = WallClock()
    store.clock = clock
    top = writes(store, "a", 5)
    store.record_events([("Secret", "a-0", f"R{i}", "", NORMAL) for i in range(3)])
    newest_event = store.list_events()[-1].id
    store.prune_changes(max_age_s=60, max_rows=1000)  # the mark
    clock.advance(HOUR)
    assert store.prune_changes(max_age_s=60, max_rows=1000) == 4  # all but the newest
    assert store.prune_events(max_age_s=60, max_rows=1000) == 2
    assert store.revision() == top and store.compacted_revision() == top - 1
    assert store.create(secret("b")).metadata.resource_version == top + 1  # not 1 again
    store.record_event("Secret", "b", "After")
    assert [e.id for e in store.list_events()] == [newest_event, newest_event + 1]


def test_tokens_dead_longer_than_the_retention_go_and_live_ones_stay(store: Store) -> None:
    """Every login makes a token that expires: without pruning the table grows a row a login."""
    clock = WallClock()
    store.clock = clock
    now = clock()
    store.create_token("forever", "viewer")
    store.create_token("expired-long-ago", "viewer", expires_at=now - timedelta(seconds=2 * HOUR))
    store.create_token("expired-just-now", "viewer", expires_at=now - timedelta(seconds=60))
    store.create_token("valid", "viewer", expires_at=now + timedelta(seconds=HOUR))
    store.create_token("revoked", "viewer")
    store.revoke_token("revoked", by="admin")  # revoked at the wall clock's now
    assert prune(store, Limits(HOUR, 1000, HOUR, 1000, tokens_dead_for_s=HOUR)).tokens == 1
    assert {t.name for t in store.tokens()} == {"forever", "expired-just-now", "valid", "revoked"}
    clock.advance(2 * HOUR)
    assert store.prune_tokens(dead_for_s=HOUR) == 2  # the revoked one and the one just expired
    assert {t.name for t in store.tokens()} == {"forever", "valid"}
