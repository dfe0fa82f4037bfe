"""Consistent copies of an embedded (SQLite) store, taken while it is in use.

SQLite's online backup API copies a live database page by page into another file and
restarts where a writer changed a page it had copied, so the copy is one committed state.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def sqlite_backup(source: Path, destination: Path) -> None:
    """Copy the SQLite database ``source`` (WAL included) into ``destination``, consistently."""
    with sqlite3.connect(source) as live, sqlite3.connect(destination) as copy:
        live.backup(copy)
    copy.close()
    live.close()


__all__ = ["sqlite_backup"]
