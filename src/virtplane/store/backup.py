"""Consistent copies of an embedded (SQLite) store, taken while it is in use.

SQLite's online backup API copies a live database page by page into another file and
restarts where a writer changed a page it had copied, so the copy is one committed state.
Copied in one step, as here, it holds a read transaction for the whole copy: in WAL mode
writers go on meanwhile, and the copy is the state of the moment it began.

A PostgreSQL store is not copied here: ``pg_dump`` (one snapshot, any size, run where the
operator's database tools and credentials are) is the tool for it (``POSTGRES_BACKUP``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import BinaryIO

from sqlalchemy.engine import make_url

__all__ = ["POSTGRES_BACKUP", "private_copy", "sqlite_backup", "sqlite_path"]

POSTGRES_BACKUP = (
    "the store is PostgreSQL: back it up with pg_dump, which copies one consistent snapshot "
    "while the server runs (pg_dump --format=custom --file=virtplane.dump DATABASE_URL), and "
    "restore it with pg_restore into an empty database while no server runs "
    "(docs/backup-and-restore.md)"
)
"""Why the API does not copy a PostgreSQL store, and how to do it instead."""


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL; None for another database or an in-memory one."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def sqlite_backup(source: Path, destination: Path) -> None:
    """Copy the SQLite database ``source`` (WAL included) into ``destination``, consistently.

    ``source`` must exist: ``sqlite3.connect`` would create an empty database in its place."""
    if not source.is_file():
        raise FileNotFoundError(f"no database at {source}")
    with (
        contextlib.closing(sqlite3.connect(source)) as live,
        contextlib.closing(sqlite3.connect(destination)) as copy,
    ):
        live.backup(copy)


def private_copy(source: Path, directory: Path) -> BinaryIO:
    """A consistent copy of ``source``, open for reading, in a file that no longer has a name.

    The copy is made in ``directory`` (the store's own: it has room for one more copy of the
    database, and the data directory is private) under a 0600 name that is removed once the
    file is open, so that neither a finished nor an interrupted download, nor a crash of the
    server, leaves a copy of the store (tokens' hashes, secrets) behind."""
    descriptor, name = tempfile.mkstemp(prefix=".backup-", suffix=".db", dir=directory)
    os.close(descriptor)
    path = Path(name)
    try:
        sqlite_backup(source, path)
        return path.open("rb")
    finally:
        path.unlink(missing_ok=True)
        Path(f"{name}-journal").unlink(missing_ok=True)
