"""Opening a store: refuse data from a newer release, upgrade in one transaction, back up first.

``Store.migrate`` runs ``upgrade_store`` before a server serves. In this order:

1. Read what is there (the schema's Alembic revision, the release recorded in
   ``store_meta``). A revision this code does not know, or a recorded release newer than
   its own, is data from a newer release: ``NewerData``, one line, nothing touched.
2. One transaction (SQLite: ``BEGIN IMMEDIATE``, with DDL inside it; PostgreSQL: DDL is
   transactional, and replicas wait on an advisory lock): the Alembic revisions up to
   head, the data migrations (``migrations.data.upgrade_bodies``), the bodies through the
   current models (``bodies.normalize_bodies``; an unreadable one is quarantined,
   ``quarantine``), and this release recorded. Any failure rolls all of it back: the
   old release can still start on the database.
3. When the transaction changed a store that had data, SQLite's online backup copies the
   database as it was (the transaction is not committed yet and holds the write lock, so
   the copy is the last committed state) into ``backups/`` beside it, private (0600); then
   the transaction commits. PostgreSQL is not copied: the log says how (``pg_dump``).

The log lists what each step changed (docs/upgrading.md).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, select, text, update
from sqlalchemy import insert as sql_insert

from virtplane import UNKNOWN_VERSION, __version__
from virtplane.crashpoints import crashpoint
from virtplane.store import schema
from virtplane.store.backup import sqlite_backup
from virtplane.store.bodies import Normalised, normalize_bodies
from virtplane.store.database import LOCK_MIGRATE
from virtplane.store.errors import StoreError
from virtplane.store.migrations.data import LATEST as LATEST_DATA
from virtplane.store.migrations.data import data_version, upgrade_bodies
from virtplane.store.quarantine import set_aside

if TYPE_CHECKING:
    from virtplane.store.database import Database

log = logging.getLogger("virtplane.store.upgrade")

MIGRATIONS = Path(__file__).parent / "migrations"
BACKUPS = "backups"
"""The directory beside a SQLite database where the upgrade's backups go."""
RELEASE_KEY = "release"
UPGRADING_DOC = "docs/upgrading.md"
_MAX_CAUSE = 400


@functools.cache
def known_revisions() -> tuple[str, ...]:
    """Every schema revision this code has, oldest first: each file of ``migrations/versions`` is
    named after its revision, ``NNNN_what.py`` (``tests/store/test_store.py`` holds Alembic to that)."""
    return tuple(
        sorted(path.name[:4] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    )


def head_revision() -> str:
    """The newest migration's revision."""
    return known_revisions()[-1]


class NewerData(StoreError):
    """The store was written by a newer release; nothing was changed."""


class UpgradeFailed(StoreError):
    """The upgrade failed and was rolled back: the store is as it was."""


def release_key(version: str | None) -> tuple[int, ...] | None:
    """``0.12.3`` as (0, 12, 3), to compare releases; None where there is no number to compare."""
    if version is None or version == UNKNOWN_VERSION:
        return None
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else None


@dataclass(frozen=True)
class Found:
    """What an opened store holds: its schema revision (None: empty), the release recorded, and
    the last data migration it had (None: none recorded)."""

    revision: str | None
    release: str | None
    data: int | None = None


def read_found(connection: Connection) -> Found:
    """Read without failing a statement (a failed one would end a PostgreSQL transaction)."""
    tables = set(inspect(connection).get_table_names())
    if "alembic_version" not in tables:
        return Found(None, None)
    revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    release = None
    if "store_meta" in tables:
        meta = schema.store_meta
        release = connection.execute(select(meta.c.value).where(meta.c.key == RELEASE_KEY)).scalar()
    data = data_version(connection) if "feed_state" in tables else None
    return Found(None if revision is None else str(revision), release, data)


def refuse_newer(found: Found, own: str = __version__) -> None:
    """``NewerData`` when ``found`` was written by a newer release than ``own``."""
    head = head_revision()
    what_to_do = (
        f"start that release, or restore the backup taken before it upgraded this store ({UPGRADING_DOC}); "
        "nothing was changed"
    )
    if found.revision is not None and found.revision not in known_revisions():
        raise NewerData(
            f"the store's schema is at revision {found.revision}, which release {own} (schema {head}) "
            f"does not know: a newer release wrote it; {what_to_do}"
        )
    if found.data is not None and found.data > LATEST_DATA:
        raise NewerData(
            f"the store has had data migration {found.data}, which release {own} (data migrations up to "
            f"{LATEST_DATA}) does not know: a newer release wrote it; {what_to_do}"
        )
    recorded, mine = release_key(found.release), release_key(own)
    if recorded is not None and mine is not None and recorded > mine:
        raise NewerData(
            f"the store was upgraded by release {found.release}, newer than this release {own}; {what_to_do}"
        )


@dataclass
class UpgradeReport:
    """What one ``upgrade_store`` changed."""

    found: Found
    release: str
    applied: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    bodies: Normalised = field(default_factory=Normalised)
    release_recorded: bool = False
    backup: Path | None = None

    def changed(self) -> bool:
        return bool(self.applied or self.data or self.bodies.changed() or self.release_recorded)

    def log_lines(self) -> list[tuple[int, str]]:
        """(level, line) for the start-up log: one line per change."""
        lines: list[tuple[int, str]] = []
        if self.backup is not None:
            lines.append((logging.INFO, f"store upgrade: backed up the store as it was to {self.backup}"))
        if self.applied:
            was = self.found.revision or "empty"
            lines.append(
                (
                    logging.INFO,
                    f"store upgrade: schema {was} -> {self.applied[-1]} (applied {', '.join(self.applied)})",
                )
            )
        lines += [(logging.INFO, f"store upgrade: data migration: {line}") for line in self.data]
        if self.bodies.rewritten:
            counts = ", ".join(f"{kind} {count}" for kind, count in sorted(self.bodies.rewritten.items()))
            lines.append((logging.INFO, f"store upgrade: bodies rewritten in the current shape: {counts}"))
        lines += [(logging.WARNING, f"store upgrade: {item.log_line()}") for item in self.bodies.unreadable]
        if self.release_recorded:
            lines.append(
                (
                    logging.INFO,
                    f"store upgrade: release {self.found.release or 'unrecorded'} -> {self.release}",
                )
            )
        return lines


def upgrade_store(store: Database, release: str = __version__) -> UpgradeReport:
    """Bring ``store`` to this release, whole or not at all (the module docstring); what changed."""
    with store.engine.connect() as connection:
        found = read_found(connection)
        connection.rollback()
    refuse_newer(found, release)
    upgrading = found.revision != head_revision() or (found.release != release and release != UNKNOWN_VERSION)
    if found.revision is not None and upgrading and not store.is_sqlite:
        log.warning(
            "store upgrade: schema %s, release %s -> schema %s, release %s on PostgreSQL, which is not "
            "backed up automatically: to be able to go back, stop virtplane and take one with pg_dump "
            "first (%s)",
            found.revision,
            found.release or "unrecorded",
            head_revision(),
            release,
            UPGRADING_DOC,
        )
    try:
        with _one_transaction(store) as connection:
            store._advisory_lock(connection, LOCK_MIGRATE)  # replicas that start together: one upgrades
            found = read_found(connection)  # again, under the lock: another replica may have upgraded
            refuse_newer(found, release)
            report = _upgrade(store, connection, found, release)
            if report.changed() and found.revision is not None:
                report.backup = _back_up(store, found)
            crashpoint("upgrade.before-commit")
    except NewerData:
        raise
    except Exception as error:
        log.exception("store upgrade failed and was rolled back: the store is as it was")
        cause = " ".join(str(error).split())  # one line: a database error quotes its SQL over several
        raise UpgradeFailed(
            f"the store upgrade to release {release} failed and was rolled back (schema still "
            f"{found.revision or 'empty'}): {type(error).__name__}: {cause[:_MAX_CAUSE]}"
        ) from error
    for level, line in report.log_lines():
        log.log(level, line)
    return report


def _upgrade(store: Database, connection: Connection, found: Found, release: str) -> UpgradeReport:
    report = UpgradeReport(found=found, release=release)
    if found.revision != head_revision():
        report.applied = _upgrade_schema(connection, found.revision)
    report.data = upgrade_bodies(connection, store.keyring)  # the secrets key: d0003 seals
    # A new release reads every stored body once, also of kinds whose shape it did not change.
    new_release = found.release != release and release != UNKNOWN_VERSION
    report.bodies = normalize_bodies(
        connection, every_kind=bool(report.applied or report.data or new_release)
    )
    report.bodies.unreadable = set_aside(store, connection, report.bodies.unreadable, release)
    if new_release:
        _record_release(connection, found.release, release)
        report.release_recorded = True
    return report


def _upgrade_schema(connection: Connection, revision: str | None) -> list[str]:
    """Alembic's revisions from ``revision`` to head, in ``connection``'s transaction; the ones applied."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
    start = -1 if revision is None else known_revisions().index(revision)
    return list(known_revisions()[start + 1 :])


def _record_release(connection: Connection, recorded: str | None, release: str) -> None:
    meta = schema.store_meta
    if recorded is None:
        connection.execute(sql_insert(meta).values(key=RELEASE_KEY, value=release))
    else:
        connection.execute(update(meta).where(meta.c.key == RELEASE_KEY).values(value=release))


@contextmanager
def _one_transaction(store: Database) -> Iterator[Connection]:
    """One transaction for the whole upgrade, DDL included; committed when the block ends."""
    with store.engine.connect() as connection:
        if store.is_sqlite:
            # pysqlite begins a transaction only before INSERT, UPDATE or DELETE: Alembic's
            # CREATE and ALTER would each commit on their own. In its autocommit mode we begin
            # ourselves, IMMEDIATE so that the write lock is ours from the start. (The raw
            # connection is not reused: a SQLite store's engine has no pool.)
            connection.connection.driver_connection.isolation_level = None  # type: ignore[union-attr]
            with connection.begin():
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                yield connection
        else:
            with connection.begin():
                yield connection


def _back_up(store: Database, found: Found) -> Path | None:
    """SQLite: a private copy of the database as last committed, in ``backups/`` beside it."""
    database = store.engine.url.database
    if not store.is_sqlite or not database or database == ":memory:":
        return None
    source = Path(database)
    directory = source.parent / BACKUPS
    directory.mkdir(mode=0o700, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    release = re.sub(r"[^A-Za-z0-9.+-]", "_", found.release or "unrecorded")  # a file name
    destination = (
        directory / f"{source.stem}-schema-{found.revision}-release-{release}-{stamp}{source.suffix}"
    )
    # created private before a byte is copied into it (an empty file is an empty database)
    os.close(os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    sqlite_backup(source, destination)
    return destination


__all__ = [
    "MIGRATIONS",
    "Found",
    "NewerData",
    "UpgradeFailed",
    "UpgradeReport",
    "head_revision",
    "known_revisions",
    "read_found",
    "refuse_newer",
    "upgrade_store",
]
