"""The simulator's state file (``SimCloud(state_path=...)``); what it keeps is the package
docstring's "Restarts", its tables are ``_persist_tables``.

The file is SQLite (WAL, ``synchronous=OFF``) with one row per entity. A commit survives
the death of the process, SIGKILL included, which is what a hypervisor outliving its
control plane needs; not a power cut of the machine (the file may be corrupt after one),
which the simulator does not model. In WAL mode OFF gives up only the fsyncs of
checkpoints (NORMAL's one difference), about a third of a commit's cost at a cold start's
20,000 commits.

Write path: the simulator's records mark what changes (``_changes``) and the outermost
entry point that caused the change (a driver call, a ``SimCloud`` method, a timer
callback) writes the current row of every marked entity, and only those, in one
transaction before it returns. A change spanning entities (a migration's switch-over
moves a domain between hosts and lands its disks) is therefore atomic.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from virtplane.drivers.base import DomainSpec

from . import _persist_migrations, _persist_tables
from ._changes import ChangeLog, Entity
from ._persist_tables import SCHEMA, TABLES, Row

if TYPE_CHECKING:
    from ._host import SimHost
    from ._host_record import HostPorts
    from ._model import SimDomain
    from ._precopy import Migration
    from ._storage import SavedVolume, SimPool

log = logging.getLogger(__name__)

SCHEMA_VERSION = 5
"""2 added the ``migrations`` table (a file of version 1 is upgraded by creating it); 3 the
hosts' ``bridges`` (added to an older file's table, empty); 4 the migrations' ``policy``
(added to an older file's table, ``{}``: no auto-converge, no post-copy); 5 the domains'
``checkpoints`` and ``backup`` (none)."""
_BACKUPS_ADDED = "the domains' checkpoints and backup jobs (none)"
_UPGRADES = {
    "1": f"added the migrations table, the hosts' bridges (none), the migrations' policy (none), {_BACKUPS_ADDED}",
    "2": f"added the hosts' bridges (none), the migrations' policy (none), {_BACKUPS_ADDED}",
    "3": f"added the migrations' policy (none), {_BACKUPS_ADDED}",
    "4": f"added {_BACKUPS_ADDED}",
}
"""What opening a file of an older schema changes in it (said in the log)."""


class SimJournal:
    """The state file: the write of a batch of changes, and the records on load.

    ``rows_written`` and ``commits`` count what ``write`` did, for tests and curious operators.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=OFF")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(SCHEMA)
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        columns = {c[1] for c in self._conn.execute("PRAGMA table_info(hosts)")}
        if "bridges" not in columns:  # a file of version 1 or 2
            self._conn.execute("ALTER TABLE hosts ADD COLUMN bridges TEXT NOT NULL DEFAULT '[]'")
        if "policy" not in {c[1] for c in self._conn.execute("PRAGMA table_info(migrations)")}:  # 1 to 3
            self._conn.execute("ALTER TABLE migrations ADD COLUMN policy TEXT NOT NULL DEFAULT '{}'")
        if "backup" not in {c[1] for c in self._conn.execute("PRAGMA table_info(domains)")}:  # 1 to 4
            self._conn.execute("ALTER TABLE domains ADD COLUMN checkpoints TEXT NOT NULL DEFAULT '[]'")
            self._conn.execute("ALTER TABLE domains ADD COLUMN backup TEXT NOT NULL DEFAULT 'null'")
        if row is not None and row[0] in _UPGRADES:
            log.info(
                "simulator state file %s: schema %s upgraded to %s: %s",
                path,
                row[0],
                SCHEMA_VERSION,
                _UPGRADES[row[0]],
            )
        if row is None or row[0] in _UPGRADES:
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            self._conn.close()
            raise ValueError(f"{path}: simulator state schema {row[0]}, this version reads {SCHEMA_VERSION}")
        self.rows_written = 0
        self.commits = 0

    def close(self) -> None:
        self._conn.close()

    @property
    def total_changes(self) -> int:
        """Rows SQLite inserted, updated or deleted through this connection (its own count)."""
        return self._conn.total_changes

    # ------------------------------------------------------------------ write

    def write(self, changes: ChangeLog) -> None:
        """Write the current row of every marked entity in one transaction, then clear the log.
        On failure the log keeps its marks, for the next write."""
        if not changes.pending:
            return
        batches: list[tuple[str, list[Row]]] = []
        for entity, marked in changes.changes().items():
            table = TABLES[entity]
            upserts: list[Row] = []
            deletes: list[Row] = []
            for key, value in sorted(marked.items(), key=lambda item: item[0]):
                row = None if value is None else table.row(key, value)
                if row is None:
                    deletes.append(key)
                else:
                    upserts.append(row)
            batches += [(table.delete, deletes), (table.upsert, upserts)]
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql, rows in batches:
                if rows:
                    conn.executemany(sql, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.rows_written += sum(len(rows) for _, rows in batches)
        self.commits += 1
        changes.clear()

    # ------------------------------------------------------------------ read (on load)

    def _rows(self, entity: Entity) -> Sequence[Row]:
        return self._conn.execute(TABLES[entity].select).fetchall()

    def load_hosts(self, ports: HostPorts) -> Iterator[SimHost]:
        return _persist_tables.hosts(self._rows, ports)

    def load_domains(self) -> Iterator[tuple[str, SimDomain]]:
        return _persist_tables.domains(self._rows)

    def load_pools(self, changes: ChangeLog) -> list[SimPool]:
        return _persist_tables.pools(self._rows, changes)

    def load_snapshots(self) -> Iterator[tuple[str, SavedVolume]]:
        return _persist_tables.snapshots(self._rows)

    def load_saved_memory(self) -> Iterator[tuple[str, tuple[DomainSpec, str]]]:
        return _persist_tables.saved_memory(self._rows)

    def load_dirty_rates(self) -> Iterator[tuple[str, float]]:
        return _persist_tables.dirty_rates(self._rows)

    def load_migrations(self, host_named: Callable[[str], SimHost | None]) -> list[Migration]:
        return _persist_migrations.load(self._rows(Entity.MIGRATION), host_named)
