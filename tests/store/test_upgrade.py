"""An upgrade commits whole or not at all, after a backup; newer data is refused untouched (issue 30)."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

import virtplane.store.upgrade as upgrade
from tests.postgres.pg import schema_url
from tests.store.upgrades import contents, forget_fingerprints, old_vm, store_at
from virtplane import __version__
from virtplane.domain.resources import VirtualMachine
from virtplane.store.store import Store, sqlite_url
from virtplane.store.upgrade import NewerData, UpgradeFailed, head_revision

OLD = "0004"
"""The schema of the release before this one's revision 0005."""


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store an older release left: schema 0004, two VMs in an older shape, no recorded release."""

    def made(url: str) -> Store:
        store = store_at(url, OLD)
        old_vm(store, "a")
        old_vm(store, "b", cpu=2)
        forget_fingerprints(store)
        return store

    if request.param == "sqlite":
        store = made(sqlite_url(tmp_path / "virtplane.db"))
        yield store
        store.close()
        return
    with schema_url() as url:
        store = made(url)
        try:
            yield store
        finally:
            store.close()


def test_a_data_migration_that_fails_leaves_the_store_as_it_was(
    old_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alembic's revisions have run and a data migration has written when it fails: all of it
    rolls back (red when Alembic's DDL committed on its own, as it did before)."""
    before = contents(old_store)

    def failing(connection: Connection, keyring: object = None) -> list[str]:
        connection.execute(text("UPDATE objects SET body = '{}' WHERE name = 'a'"))
        raise RuntimeError("injected: a data migration that raises half-way")

    monkeypatch.setattr(upgrade, "upgrade_bodies", failing)
    with pytest.raises(UpgradeFailed, match=r"rolled back.*schema still 0004.*injected"):
        old_store.migrate()
    assert contents(old_store) == before, "the schema, the bodies and the bookkeeping as they were"
    assert old_store.schema_revision() == OLD, "the old release finds its own revision"


def test_a_failure_after_the_bodies_were_rewritten_leaves_them_as_they_were(
    old_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The normalisation has rewritten the bodies when the next step fails: they roll back too
    (red when its batches committed one by one, as they did before)."""
    before = contents(old_store)
    rewritten: list[bool] = []

    def failing(store: Store, connection: Connection, *rest: object) -> None:
        body = connection.execute(text("SELECT body FROM objects WHERE name = 'a'")).scalar_one()
        rewritten.append("termination_grace_period_s" in json.loads(body)["spec"])
        raise RuntimeError("injected after the rewrite")

    monkeypatch.setattr(upgrade, "set_aside", failing)
    with pytest.raises(UpgradeFailed):
        old_store.migrate()
    assert rewritten == [True], "the failure came after the rewrite"
    assert contents(old_store) == before


def test_an_upgrade_lists_what_each_step_changed(old_store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="virtplane.store.upgrade")
    report = old_store.migrate()
    assert report.applied == ["0005", "0006"] and old_store.schema_revision() == head_revision()
    assert report.bodies.rewritten == {"VirtualMachine": 2}
    lines = [record.getMessage() for record in caplog.records]
    assert f"store upgrade: schema {OLD} -> 0006 (applied 0005, 0006)" in lines
    assert "store upgrade: bodies rewritten in the current shape: VirtualMachine 2" in lines
    assert f"store upgrade: release unrecorded -> {__version__}" in lines
    assert old_store.get(VirtualMachine, "b").spec.cpu == 2

    caplog.clear()
    again = old_store.migrate()
    assert not again.changed() and again.backup is None, "a start on current data changes nothing"
    assert [r for r in caplog.records if r.getMessage().startswith("store upgrade")] == []


def test_sqlite_the_store_is_backed_up_before_it_is_upgraded(tmp_path: Path) -> None:
    database = tmp_path / "virtplane.db"
    store = store_at(sqlite_url(database), OLD)
    old_vm(store, "a")
    forget_fingerprints(store)
    with store.engine.connect() as connection:
        old_body = connection.execute(text("SELECT body FROM objects WHERE name = 'a'")).scalar_one()

    report = store.migrate()
    store.close()

    assert report.backup is not None and report.backup.parent == tmp_path / "backups"
    assert report.backup.name.startswith(f"virtplane-schema-{OLD}-release-unrecorded-")
    assert stat.S_IMODE(os.stat(report.backup).st_mode) == 0o600, "the store's secrets stay private"
    with sqlite3.connect(report.backup) as copy:
        assert copy.execute("SELECT version_num FROM alembic_version").fetchone() == (OLD,)
        assert copy.execute("SELECT body FROM objects WHERE name = 'a'").fetchone() == (old_body,)
    copy.close()
    assert json.loads(old_body)["spec"].get("termination_grace_period_s") is None
    restored = Store(sqlite_url(report.backup))
    assert restored.schema_revision() == OLD, "the backup opens: the old release can start on it"
    restored.close()


def test_sqlite_no_upgrade_without_its_backup(tmp_path: Path) -> None:
    store = store_at(sqlite_url(tmp_path / "virtplane.db"), OLD)
    old_vm(store, "a")
    before = contents(store)
    (tmp_path / "backups").write_text("a file where the backups directory goes")

    with pytest.raises(UpgradeFailed, match="FileExistsError") as failed:
        store.migrate()

    assert "\n" not in str(failed.value)
    assert contents(store) == before, "rolled back: the old release can still start"
    store.close()


def test_sqlite_an_empty_store_is_not_backed_up(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "virtplane.db"))
    assert store.migrate().backup is None
    store.close()
    assert not (tmp_path / "backups").exists()


@pytest.mark.postgres
def test_postgres_tells_how_to_back_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="virtplane.store.upgrade")
    with schema_url() as url:
        store = store_at(url, OLD)
        try:
            report = store.migrate()
        finally:
            store.close()
    assert report.backup is None
    assert any("pg_dump" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


# ---------------------------------------------------------------------------- newer data


def _newer_schema(connection: Connection) -> None:
    connection.execute(text("UPDATE alembic_version SET version_num = '0999'"))


def _newer_release(connection: Connection) -> None:
    connection.execute(text("UPDATE store_meta SET value = '999.0.0' WHERE key = 'release'"))


def _newer_data(connection: Connection) -> None:
    # a newer release's data migration, with no schema change and the release unrecorded
    connection.execute(text("UPDATE feed_state SET revision = 999 WHERE name = 'data:version'"))
    connection.execute(text("DELETE FROM store_meta WHERE key = 'release'"))


@pytest.mark.parametrize(
    ("make_newer", "found"),
    [
        (_newer_schema, "schema is at revision 0999"),
        (_newer_release, "upgraded by release 999.0.0"),
        (_newer_data, "has had data migration 999"),
    ],
)
def test_sqlite_newer_data_is_refused_in_one_line_and_left_byte_for_byte(
    tmp_path: Path, make_newer: object, found: str
) -> None:
    database = tmp_path / "virtplane.db"
    store = Store(sqlite_url(database))
    store.migrate()
    old_vm(store, "a")
    with store.engine.begin() as connection:
        make_newer(connection)  # type: ignore[operator]
    store.close()
    before = database.read_bytes()

    opened = Store(sqlite_url(database))
    with pytest.raises(NewerData):
        opened.refuse_newer_data()  # what a command that only reads the store asks
    with pytest.raises(NewerData) as refused:
        opened.migrate()
    opened.close()

    message = str(refused.value)
    assert "\n" not in message and found in message
    assert "start that release, or restore the backup" in message and "nothing was changed" in message
    assert database.read_bytes() == before
    assert not (tmp_path / "backups").exists()


def test_newer_data_is_refused_on_every_backend(old_store: Store) -> None:
    old_store.migrate()
    with old_store.engine.begin() as connection:
        _newer_release(connection)
    before = contents(old_store)
    with pytest.raises(NewerData, match=re.escape(f"newer than this release {__version__}")):
        old_store.migrate()
    assert contents(old_store) == before
