"""``virtplane store-restore FILE --data-dir DIR``: put a backup in place as DIR's store.

For a server that is stopped (``virtplane restore`` is something else: a VM from a snapshot).
It takes the data directory's lock, so it refuses while a server holds it; checks that FILE
is a whole virtplane store this release can open; moves the store it replaces aside, with
its WAL and shared-memory files (a WAL left beside another database would be replayed into
it); and writes FILE in under a temporary name, renamed last. What the restored control
plane then does with the hosts is docs/decisions.md, "Restoring the control plane from a
backup".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from virtplane.cli.context import state_of
from virtplane.cli.errors import CliError

__all__ = ["register"]

STORE_FILE = "virtplane.db"
SIDE_FILES = ("-wal", "-shm", "-journal")

_EPILOG = (
    "Examples:\n"
    "  virtplane store-restore virtplane-2030-01-01.db --data-dir /var/lib/virtplane\n\n"
    "Stop the server first; start it again afterwards. The store it replaces is kept beside it as "
    "virtplane.db.replaced-TIME. Docs: docs/backup-and-restore.md."
)


def store_restore(
    ctx: typer.Context,
    backup: Annotated[
        Path,
        typer.Argument(
            help="A backup made by `virtplane backup`.", exists=True, dir_okay=False, show_default=False
        ),
    ],
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="The data directory of the stopped server.")
    ] = Path("virtplane-data"),
) -> None:
    """Put a backup in place as the store of a STOPPED server's data directory (admin, on its machine).

    Refuses while a server holds the directory. The replaced store is kept, renamed.
    """
    from virtplane.runtime.datadir import DataDirBusy, DataDirLock

    revision = _check(backup)
    try:
        lock = DataDirLock(data_dir).acquire()
    except DataDirBusy as busy:
        raise CliError("DataDirBusy", f"{busy}: stop it first, then restore") from None
    try:
        os.chmod(data_dir, 0o700)
        kept = _move_aside(data_dir)
        _put_in_place(backup, data_dir / STORE_FILE)
    finally:
        lock.release()
    out = state_of(ctx).console
    out.print(f"restored {backup} into {data_dir / STORE_FILE} (schema {revision})")
    if kept:
        out.print(f"the store it replaced is kept as {kept}")
    out.print(f"start the server: virtplane serve --data-dir {data_dir}")


def _check(backup: Path) -> str:
    """The backup's schema revision, once it is known to be a whole store this release opens."""
    from virtplane.store.store import head_revision

    with backup.open("rb") as head:
        if head.read(16) != b"SQLite format 3\x00":
            raise CliError("InvalidBackup", f"{backup} is not a SQLite database")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{backup}?mode=ro", uri=True)) as copy:
            check = copy.execute("PRAGMA quick_check").fetchone()
            row = copy.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error as error:
        raise CliError("InvalidBackup", f"{backup} is not a virtplane store: {error}") from None
    if check != ("ok",) or row is None:
        raise CliError("InvalidBackup", f"{backup} is damaged or empty (SQLite's check: {check})")
    revision = str(row[0])
    if revision > head_revision():
        raise CliError(
            "BackupTooNew",
            f"{backup} has schema {revision}, newer than this release's {head_revision()}: "
            "restore it with the release that made it",
        )
    return revision


def _move_aside(data_dir: Path) -> Path | None:
    """Rename the current store and its side files to ``virtplane.db.replaced-TIME``."""
    current = data_dir / STORE_FILE
    if not current.exists():
        return None
    kept = data_dir / f"{STORE_FILE}.replaced-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    for suffix in SIDE_FILES:
        side = data_dir / f"{STORE_FILE}{suffix}"
        if side.exists():
            side.rename(f"{kept}{suffix}")
    current.rename(kept)
    return kept


def _put_in_place(backup: Path, target: Path) -> None:
    descriptor, name = tempfile.mkstemp(prefix=".restoring-", suffix=".db", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as sink, backup.open("rb") as source:
            shutil.copyfileobj(source, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(name, target)
    finally:
        Path(name).unlink(missing_ok=True)


def register(app: typer.Typer) -> None:
    app.command("store-restore", epilog=_EPILOG)(store_restore)
