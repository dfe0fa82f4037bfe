"""Durable simulator state for ``SimCloud(state_path=...)``, so the world outlives the process.

Real hypervisors keep running while the control plane crashes; with a state file the
simulated ones do too. The file is SQLite (WAL, ``synchronous=NORMAL``: a commit
survives the death of the process, SIGKILL included, though not necessarily a power cut)
with one row per entity:

- ``hosts``: capacity, up and link state, armed faults (JSON), domains killed by the
  last host failure (JSON, for the STOPPED events sent on ``host-up``);
- ``domains`` (host, name): definition, live config, state, exit reason, memory marker,
  boot count, the wall-clock time ``due`` at which a boot or shutdown in progress ends,
  whether that boot is an injected failure, and the state before a migration;
- ``pools``, ``volumes`` (with content), ``volume_snapshots``, ``saved_memory``,
  ``dirty_rates``; ``meta`` holds the schema version;
- ``migrations``: the migration jobs, with their progress (see ``_persist_migrations``).

Write path: the simulator's modules *mark* what they change (``mark_*``) and the
outermost entry point that caused the change (a driver call, a ``SimCloud`` method,
a timer callback) writes the current state of every marked entity, and only those,
in one transaction before it returns. A change spanning entities (a migration's
switch-over moves a domain between hosts and lands its disks) is therefore atomic.

Not stored: completed migration jobs (their source domain is gone), ``fault_log``, and
the constructor's timing arguments. A migration in flight goes on in the next process
(see ``SimCloud``), as libvirt carries one on without its client.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DiskAttachment, DomainSpec, DomainState, ImageRef, PoolRef

from . import _persist_migrations
from ._model import FaultKind, SimDomain

if TYPE_CHECKING:
    from ._cloud import SimCloud
    from ._host import SimHost
    from ._migration import Migration
    from ._storage import SavedVolume, SimPool

SCHEMA_VERSION = 2
"""2 added the ``migrations`` table; a file of version 1 is upgraded by creating it."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    up INTEGER NOT NULL,
    link_up INTEGER NOT NULL,
    armed TEXT NOT NULL,
    killed TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS domains (
    host TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    live TEXT,
    state TEXT NOT NULL,
    exit_reason TEXT,
    memory TEXT NOT NULL,
    boots INTEGER NOT NULL,
    due REAL NOT NULL,
    boot_fails INTEGER NOT NULL,
    state_before_migration TEXT,
    PRIMARY KEY (host, name)
);
CREATE TABLE IF NOT EXISTS pools (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    shared INTEGER NOT NULL,
    capacity_gib INTEGER NOT NULL,
    hosts TEXT NOT NULL,
    PRIMARY KEY (owner, name)
);
CREATE TABLE IF NOT EXISTS volumes (
    owner TEXT NOT NULL,
    pool TEXT NOT NULL,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    size_gib INTEGER NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (owner, pool, name)
);
CREATE TABLE IF NOT EXISTS volume_snapshots (
    handle TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    volume TEXT NOT NULL,
    size_gib INTEGER NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS saved_memory (handle TEXT PRIMARY KEY, spec TEXT NOT NULL, memory TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dirty_rates (domain TEXT PRIMARY KEY, mib_s REAL NOT NULL);
"""

_UPSERT_HOST = """
INSERT INTO hosts (name, vcpus, memory_mib, up, link_up, armed, killed) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET vcpus = excluded.vcpus, memory_mib = excluded.memory_mib,
    up = excluded.up, link_up = excluded.link_up, armed = excluded.armed, killed = excluded.killed
"""
_UPSERT_DOMAIN = """
INSERT INTO domains (host, name, spec, live, state, exit_reason, memory, boots, due, boot_fails,
    state_before_migration) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (host, name) DO UPDATE SET spec = excluded.spec, live = excluded.live,
    state = excluded.state, exit_reason = excluded.exit_reason, memory = excluded.memory,
    boots = excluded.boots, due = excluded.due, boot_fails = excluded.boot_fails,
    state_before_migration = excluded.state_before_migration
"""
_UPSERT_POOL = """
INSERT INTO pools (owner, name, shared, capacity_gib, hosts) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (owner, name) DO UPDATE SET shared = excluded.shared,
    capacity_gib = excluded.capacity_gib, hosts = excluded.hosts
"""
_UPSERT_VOLUME = """
INSERT INTO volumes (owner, pool, name, path, size_gib, content) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (owner, pool, name) DO UPDATE SET path = excluded.path, size_gib = excluded.size_gib,
    content = excluded.content
"""
_UPSERT_SNAPSHOT = """
INSERT INTO volume_snapshots (handle, pool, volume, size_gib, content) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (handle) DO UPDATE SET pool = excluded.pool, volume = excluded.volume,
    size_gib = excluded.size_gib, content = excluded.content
"""
_UPSERT_MEMORY = """
INSERT INTO saved_memory (handle, spec, memory) VALUES (?, ?, ?)
ON CONFLICT (handle) DO UPDATE SET spec = excluded.spec, memory = excluded.memory
"""
_UPSERT_DIRTY_RATE = """
INSERT INTO dirty_rates (domain, mib_s) VALUES (?, ?)
ON CONFLICT (domain) DO UPDATE SET mib_s = excluded.mib_s
"""

ARMED_KINDS = (FaultKind.FAIL_START, FaultKind.FAIL_MIGRATION, FaultKind.STALL_MIGRATION)


def spec_to_json(spec: DomainSpec) -> str:
    return json.dumps(dataclasses.asdict(spec), separators=(",", ":"))


def _image_from_json(data: Any) -> ImageRef | None:
    if not isinstance(data, dict):
        return None  # a path from before images came from the library: not kept
    return ImageRef(pool=PoolRef(**data["pool"]), file=data["file"], format=data.get("format", "raw"))


def spec_from_json(text: str) -> DomainSpec:
    data = json.loads(text)
    disks = tuple(DiskAttachment(**disk) for disk in data.pop("disks", ()))
    kernel, initrd = _image_from_json(data.pop("kernel", None)), _image_from_json(data.pop("initrd", None))
    return DomainSpec(**data, disks=disks, kernel=kernel, initrd=initrd)


def armed_faults(host: SimHost) -> dict[FaultKind, dict[str | None, int]]:
    return {
        FaultKind.FAIL_START: host.fail_starts,
        FaultKind.FAIL_MIGRATION: host.fail_migrations,
        FaultKind.STALL_MIGRATION: host.stall_migrations,
    }


def _armed_to_json(host: SimHost) -> str:
    # JSON object keys are strings, so a host-wide fault (domain None) is stored as a pair
    return json.dumps(
        {
            str(kind): sorted(armed.items(), key=lambda kv: kv[0] or "")
            for kind, armed in armed_faults(host).items()
        }
    )


class SimJournal:
    """The state file: marks of changed entities, the write of a batch, and the raw rows on load.

    ``rows_written`` and ``commits`` count what ``flush`` did, for tests and curious operators.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(_SCHEMA + _persist_migrations.SCHEMA)
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None or row[0] == "1":
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        elif row[0] != str(SCHEMA_VERSION):
            self._conn.close()
            raise ValueError(f"{path}: simulator state schema {row[0]}, this version reads {SCHEMA_VERSION}")
        self.depth = 0  # nesting of entry points; the outermost one flushes
        self.rows_written = 0
        self.commits = 0
        self._hosts: set[str] = set()
        self._domains: set[tuple[str, str]] = set()
        self._pools: set[tuple[str, str]] = set()
        self._volumes: set[tuple[str, str, str]] = set()
        self._snapshots: set[str] = set()
        self._memories: set[str] = set()
        self._dirty_rates: set[str] = set()
        self._migrations: set[str] = set()

    def close(self) -> None:
        self._conn.close()

    @property
    def total_changes(self) -> int:
        """Rows SQLite inserted, updated or deleted through this connection (its own count)."""
        return self._conn.total_changes

    # ------------------------------------------------------------------ marks

    def mark_host(self, name: str) -> None:
        self._hosts.add(name)

    def mark_domain(self, host: str, name: str) -> None:
        self._domains.add((host, name))

    def mark_pool(self, owner: str, name: str) -> None:
        self._pools.add((owner, name))

    def mark_volume(self, owner: str, pool: str, name: str) -> None:
        self._volumes.add((owner, pool, name))

    def mark_snapshot(self, handle: str) -> None:
        self._snapshots.add(handle)

    def mark_memory(self, handle: str) -> None:
        self._memories.add(handle)

    def mark_dirty_rate(self, domain: str) -> None:
        self._dirty_rates.add(domain)

    def mark_migration(self, domain: str) -> None:
        self._migrations.add(domain)

    @property
    def _marks(self) -> tuple[set[Any], ...]:
        return (
            self._hosts,
            self._domains,
            self._pools,
            self._volumes,
            self._snapshots,
            self._memories,
            self._dirty_rates,
            self._migrations,
        )

    @property
    def pending(self) -> bool:
        return any(self._marks)

    # ------------------------------------------------------------------ write

    def flush(self, cloud: SimCloud) -> None:
        """Write the current state of every marked entity in one transaction."""
        if not self.pending:
            return
        batches: list[tuple[str, list[tuple[Any, ...]]]] = [
            *self._host_rows(cloud),
            *self._domain_rows(cloud),
            *self._pool_rows(cloud),
            *self._volume_rows(cloud),
            *self._snapshot_rows(cloud),
            *self._memory_rows(cloud),
            *self._dirty_rate_rows(cloud),
            *self._split(
                _persist_migrations.UPSERT,
                _persist_migrations.DELETE,
                (((d,), _persist_migrations.row(cloud, d)) for d in sorted(self._migrations)),
            ),
        ]
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
            raise  # the marks stay: the next flush writes them again
        self.rows_written += sum(len(rows) for _, rows in batches)
        self.commits += 1
        for marks in self._marks:
            marks.clear()

    @staticmethod
    def _split(
        upsert: str, delete: str, rows: Iterable[tuple[tuple[Any, ...], tuple[Any, ...] | None]]
    ) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        """(key, row or None) pairs → an upsert batch and a delete batch."""
        upserts: list[tuple[Any, ...]] = []
        deletes: list[tuple[Any, ...]] = []
        for key, row in rows:
            if row is None:
                deletes.append(key)
            else:
                upserts.append(row)
        yield delete, deletes
        yield upsert, upserts

    def _host_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(name: str) -> tuple[Any, ...] | None:
            host = cloud.host_named(name)
            if host is None:
                return None
            return (
                name,
                host.vcpus,
                host.memory_mib,
                int(host.up),
                int(host.link_up),
                _armed_to_json(host),
                json.dumps(host.killed_by_failure),
            )

        yield from self._split(
            _UPSERT_HOST, "DELETE FROM hosts WHERE name = ?", (((n,), row(n)) for n in sorted(self._hosts))
        )

    def _domain_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(host_name: str, name: str) -> tuple[Any, ...] | None:
            host = cloud.host_named(host_name)
            domain = host.domains.get(name) if host is not None else None
            if domain is None:
                return None
            spec = spec_to_json(domain.spec)
            live = None
            if domain.live is not None:
                live = spec if domain.live is domain.spec else spec_to_json(domain.live)
            return (
                host_name,
                name,
                spec,
                live,
                str(domain.state),
                None if domain.exit_reason is None else str(domain.exit_reason),
                domain.memory,
                domain.boots,
                domain.due,
                int(domain.boot_fails),
                None if domain.state_before_migration is None else str(domain.state_before_migration),
            )

        yield from self._split(
            _UPSERT_DOMAIN,
            "DELETE FROM domains WHERE host = ? AND name = ?",
            ((key, row(*key)) for key in sorted(self._domains)),
        )

    def _pool_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(owner: str, name: str) -> tuple[Any, ...] | None:
            pool = cloud.storage.find_pool(owner, name)
            if pool is None:
                return None
            return (owner, name, int(pool.shared), pool.capacity_gib, json.dumps(sorted(pool.hosts)))

        yield from self._split(
            _UPSERT_POOL,
            "DELETE FROM pools WHERE owner = ? AND name = ?",
            ((key, row(*key)) for key in sorted(self._pools)),
        )

    def _volume_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(owner: str, pool_name: str, name: str) -> tuple[Any, ...] | None:
            pool = cloud.storage.find_pool(owner, pool_name)
            volume = pool.volumes.get(name) if pool is not None else None
            if volume is None:
                return None
            return (owner, pool_name, name, volume.path, volume.size_gib, volume.content)

        yield from self._split(
            _UPSERT_VOLUME,
            "DELETE FROM volumes WHERE owner = ? AND pool = ? AND name = ?",
            ((key, row(*key)) for key in sorted(self._volumes)),
        )

    def _snapshot_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(handle: str) -> tuple[Any, ...] | None:
            saved = cloud.storage.saved_volume(handle)
            if saved is None:
                return None
            return (handle, saved.pool, saved.volume, saved.size_gib, saved.content)

        yield from self._split(
            _UPSERT_SNAPSHOT,
            "DELETE FROM volume_snapshots WHERE handle = ?",
            (((h,), row(h)) for h in sorted(self._snapshots)),
        )

    def _memory_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        def row(handle: str) -> tuple[Any, ...] | None:
            saved = cloud.saved_memory(handle)
            if saved is None:
                return None
            return (handle, spec_to_json(saved[0]), saved[1])

        yield from self._split(
            _UPSERT_MEMORY,
            "DELETE FROM saved_memory WHERE handle = ?",
            (((h,), row(h)) for h in sorted(self._memories)),
        )

    def _dirty_rate_rows(self, cloud: SimCloud) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
        rates = [(domain, cloud.dirty_rate(domain)) for domain in sorted(self._dirty_rates)]
        yield _UPSERT_DIRTY_RATE, rates

    # ------------------------------------------------------------------ read (on load)

    def _rows(self, sql: str) -> Sequence[tuple[Any, ...]]:
        return self._conn.execute(sql).fetchall()

    def load_hosts(self, cloud: SimCloud) -> list[SimHost]:
        from ._host import SimHost

        hosts = []
        for name, vcpus, memory_mib, up, link_up, armed, killed in self._rows(
            "SELECT name, vcpus, memory_mib, up, link_up, armed, killed FROM hosts ORDER BY rowid"
        ):
            host = SimHost(cloud, name, vcpus, memory_mib)
            host.up = bool(up)
            host.link_up = bool(link_up)
            targets = armed_faults(host)
            for kind, pairs in json.loads(armed).items():
                targets[FaultKind(kind)].update({domain: int(count) for domain, count in pairs})
            host.killed_by_failure.extend(json.loads(killed))
            hosts.append(host)
        return hosts

    def load_domains(self) -> Iterator[tuple[str, SimDomain]]:
        for (
            host,
            _name,
            spec_text,
            live_text,
            state,
            exit_reason,
            memory,
            boots,
            due,
            boot_fails,
            before_migration,
        ) in self._rows(
            "SELECT host, name, spec, live, state, exit_reason, memory, boots, due, boot_fails, "
            "state_before_migration FROM domains ORDER BY rowid"
        ):
            spec = spec_from_json(spec_text)
            live = None
            if live_text is not None:
                live = spec if live_text == spec_text else spec_from_json(live_text)
            yield (
                host,
                SimDomain(
                    spec=spec,
                    live=live,
                    state=DomainState(state),
                    exit_reason=None if exit_reason is None else ExitReason(exit_reason),
                    memory=memory,
                    boots=boots,
                    due=due,
                    boot_fails=bool(boot_fails),
                    state_before_migration=None
                    if before_migration is None
                    else DomainState(before_migration),
                ),
            )

    def load_pools(self) -> list[SimPool]:
        from ._storage import SimPool, SimVolume

        pools: dict[tuple[str, str], SimPool] = {}
        for owner, name, shared, capacity_gib, hosts in self._rows(
            "SELECT owner, name, shared, capacity_gib, hosts FROM pools ORDER BY rowid"
        ):
            pools[(owner, name)] = SimPool(
                name, bool(shared), capacity_gib, hosts=set(json.loads(hosts)), owner=owner
            )
        for owner, pool_name, name, path, size_gib, content in self._rows(
            "SELECT owner, pool, name, path, size_gib, content FROM volumes ORDER BY rowid"
        ):
            pool = pools.get((owner, pool_name))
            if pool is not None:
                pool.volumes[name] = SimVolume(name, path, size_gib, content)
        return list(pools.values())

    def load_snapshots(self) -> dict[str, SavedVolume]:
        from ._storage import SavedVolume

        return {
            handle: SavedVolume(pool, volume, size_gib, content)
            for handle, pool, volume, size_gib, content in self._rows(
                "SELECT handle, pool, volume, size_gib, content FROM volume_snapshots ORDER BY rowid"
            )
        }

    def load_saved_memory(self) -> dict[str, tuple[DomainSpec, str]]:
        return {
            handle: (spec_from_json(spec), memory)
            for handle, spec, memory in self._rows(
                "SELECT handle, spec, memory FROM saved_memory ORDER BY rowid"
            )
        }

    def load_dirty_rates(self) -> dict[str, float]:
        return {domain: float(rate) for domain, rate in self._rows("SELECT domain, mib_s FROM dirty_rates")}

    def load_migrations(self, cloud: SimCloud) -> list[Migration]:
        return _persist_migrations.load(cloud, self._rows(_persist_migrations.SELECT))
