"""The tables of the simulator's state file: their columns, and how a record becomes a row and back.

One row per entity (``_changes.Entity``), keyed as the ``ChangeLog`` keys it:

- ``hosts`` (name): capacity, up and link state, armed faults (JSON), the domains killed
  by the last host failure (JSON);
- ``domains`` (host, name): definition, live config, state, exit reason, memory marker,
  boot count, the clock's time ``due`` at which a boot or shutdown in progress ends,
  whether that boot is an injected failure, the state before a migration, its checkpoints
  and its last backup job (JSON, ``_backups``);
- ``pools`` (owner, name), ``volumes`` (owner, pool, name) with content,
  ``volume_snapshots``, ``saved_memory``, ``dirty_rates``; ``meta`` holds the schema version;
- ``migrations`` (domain): the jobs, see ``_persist_migrations``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import TypeAdapter

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DiskAttachment, DomainSpec, DomainState, ImageRef, NicAttachment, PoolRef

from . import _persist_migrations
from ._backup_records import CHECKPOINTS, JOB
from ._changes import ChangeLog, Entity, Key
from ._host import SimHost
from ._host_record import HostPorts
from ._model import ARMED_KINDS, ArmedFaults, FaultKind, SimDomain
from ._storage import SavedVolume, SimPool, SimVolume

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    up INTEGER NOT NULL,
    link_up INTEGER NOT NULL,
    armed TEXT NOT NULL,
    killed TEXT NOT NULL,
    bridges TEXT NOT NULL DEFAULT '[]'
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
    checkpoints TEXT NOT NULL DEFAULT '[]',
    backup TEXT NOT NULL DEFAULT 'null',
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
    + _persist_migrations.SCHEMA
)

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Table:
    """A table whose first ``key_size`` columns are its primary key, the ``ChangeLog``'s key."""

    name: str
    columns: tuple[str, ...]
    key_size: int
    row: Callable[[Key, Any], Row | None]  # the row of a marked value; None: no row to keep

    @functools.cached_property
    def upsert(self) -> str:
        keys, rest = self.columns[: self.key_size], self.columns[self.key_size :]
        return (
            f"INSERT INTO {self.name} ({', '.join(self.columns)}) VALUES ({', '.join('?' * len(self.columns))}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in rest)}"
        )

    @functools.cached_property
    def delete(self) -> str:
        return (
            f"DELETE FROM {self.name} WHERE {' AND '.join(f'{c} = ?' for c in self.columns[: self.key_size])}"
        )

    @functools.cached_property
    def select(self) -> str:
        return f"SELECT {', '.join(self.columns)} FROM {self.name} ORDER BY rowid"


# ---------------------------------------------------------------------- values in columns


_SPEC = TypeAdapter(DomainSpec)


def spec_to_json(spec: DomainSpec) -> str:
    # A domain's row is written at each change of its state: pydantic's serializer writes the
    # same JSON as dataclasses.asdict and json.dumps did, in 1-2 us instead of 13-37.
    return _SPEC.dump_json(spec).decode()


def _image_from_json(data: Any) -> ImageRef | None:
    if not isinstance(data, dict):
        return None  # a path from before images came from the library: not kept
    return ImageRef(
        pool=PoolRef(**data["pool"]),
        file=data["file"],
        format=data.get("format", "raw"),
        written_bytes=data.get("written_bytes"),
    )


def spec_from_json(text: str) -> DomainSpec:
    data = json.loads(text)
    disks = tuple(DiskAttachment(**disk) for disk in data.pop("disks", ()))
    kernel, initrd = _image_from_json(data.pop("kernel", None)), _image_from_json(data.pop("initrd", None))
    data["cdrom"] = _image_from_json(data.pop("cdrom", None))
    nics = tuple(NicAttachment(**nic) for nic in data.pop("nics", ()))
    # JSON has lists: specs compare equal as tuples
    features, disabled = tuple(data.pop("cpu_features", ())), tuple(data.pop("cpu_disabled", ()))
    return DomainSpec(
        **data,
        disks=disks,
        kernel=kernel,
        initrd=initrd,
        nics=nics,
        cpu_features=features,
        cpu_disabled=disabled,
    )


def _armed_to_json(armed: ArmedFaults) -> str:
    # JSON object keys are strings, so a host-wide fault (domain None) is stored as a pair
    return json.dumps(
        {str(kind): sorted(armed.of(kind).items(), key=lambda kv: kv[0] or "") for kind in ARMED_KINDS}
    )


def _armed_from_json(text: str) -> ArmedFaults:
    counts = {
        (FaultKind(kind), domain): int(count)
        for kind, pairs in json.loads(text).items()
        for domain, count in pairs
    }
    return ArmedFaults(MappingProxyType(counts))


def _name(value: str | None) -> str | None:
    return None if value is None else str(value)


# ---------------------------------------------------------------------- record → row


def _host_row(key: Key, host: SimHost) -> Row:
    armed, killed = _armed_to_json(host.armed), json.dumps(list(host.killed_by_failure))
    bridges = json.dumps(list(host.bridges))
    return (*key, host.vcpus, host.memory_mib, int(host.up), int(host.link_up), armed, killed, bridges)


def _domain_row(key: Key, domain: SimDomain) -> Row:
    spec = spec_to_json(domain.spec)
    live = None
    if domain.live is not None:
        live = spec if domain.live is domain.spec else spec_to_json(domain.live)
    return (
        *key,
        spec,
        live,
        str(domain.state),
        _name(domain.exit_reason),
        domain.memory,
        domain.boots,
        domain.due,
        int(domain.boot_fails),
        _name(domain.state_before_migration),
        CHECKPOINTS.dump_json(domain.checkpoints).decode(),
        JOB.dump_json(domain.backup).decode(),
    )


def _pool_row(key: Key, pool: SimPool) -> Row:
    return (*key, int(pool.shared), pool.capacity_gib, json.dumps(sorted(pool.hosts)))


def _volume_row(key: Key, volume: SimVolume) -> Row:
    return (*key, volume.path, volume.size_gib, volume.content)


def _snapshot_row(key: Key, saved: SavedVolume) -> Row:
    return (*key, saved.pool, saved.volume, saved.size_gib, saved.content)


def _memory_row(key: Key, saved: tuple[DomainSpec, str]) -> Row:
    return (*key, spec_to_json(saved[0]), saved[1])


def _dirty_rate_row(key: Key, rate: float) -> Row:
    return (*key, rate)


TABLES: dict[Entity, Table] = {
    Entity.HOST: Table(
        "hosts", ("name", "vcpus", "memory_mib", "up", "link_up", "armed", "killed", "bridges"), 1, _host_row
    ),
    Entity.DOMAIN: Table(
        "domains",
        (
            "host",
            "name",
            "spec",
            "live",
            "state",
            "exit_reason",
            "memory",
            "boots",
            "due",
            "boot_fails",
            "state_before_migration",
            "checkpoints",
            "backup",
        ),
        2,
        _domain_row,
    ),
    Entity.POOL: Table("pools", ("owner", "name", "shared", "capacity_gib", "hosts"), 2, _pool_row),
    Entity.VOLUME: Table("volumes", ("owner", "pool", "name", "path", "size_gib", "content"), 3, _volume_row),
    Entity.SNAPSHOT: Table(
        "volume_snapshots", ("handle", "pool", "volume", "size_gib", "content"), 1, _snapshot_row
    ),
    Entity.MEMORY: Table("saved_memory", ("handle", "spec", "memory"), 1, _memory_row),
    Entity.DIRTY_RATE: Table("dirty_rates", ("domain", "mib_s"), 1, _dirty_rate_row),
    Entity.MIGRATION: Table("migrations", _persist_migrations.COLUMNS, 1, _persist_migrations.row),
}


# ---------------------------------------------------------------------- row → record

Rows = Callable[[Entity], Sequence[Row]]
"""The rows of one table, in the order they were first written."""


def hosts(rows: Rows, ports: HostPorts) -> Iterator[SimHost]:
    for name, vcpus, memory_mib, up, link_up, armed, killed, bridges in rows(Entity.HOST):
        host = SimHost(ports, name, vcpus, memory_mib, tuple(json.loads(bridges)))
        host.up, host.link_up = bool(up), bool(link_up)
        host.armed = _armed_from_json(armed)
        host.killed_by_failure = tuple(json.loads(killed))
        yield host


def domains(rows: Rows) -> Iterator[tuple[str, SimDomain]]:
    """(host, domain) pairs."""
    for row in rows(Entity.DOMAIN):
        host, _, spec_text, live_text, state, exit_reason, memory, boots, due, fails, before = row[:11]
        checkpoints, backup = row[11:]
        spec = spec_from_json(spec_text)
        live = None
        if live_text is not None:
            live = spec if live_text == spec_text else spec_from_json(live_text)
        yield (
            host,
            SimDomain(
                spec,
                live=live,
                state=DomainState(state),
                exit_reason=None if exit_reason is None else ExitReason(exit_reason),
                memory=memory,
                boots=boots,
                due=due,
                boot_fails=bool(fails),
                state_before_migration=None if before is None else DomainState(before),
                checkpoints=CHECKPOINTS.validate_json(checkpoints),
                backup=JOB.validate_json(backup),
            ),
        )


def pools(rows: Rows, changes: ChangeLog) -> list[SimPool]:
    found: dict[tuple[str, str], SimPool] = {}
    for owner, name, shared, capacity_gib, pool_hosts in rows(Entity.POOL):
        pool = found[(owner, name)] = SimPool(changes, name, bool(shared), capacity_gib, owner)
        pool.hosts = frozenset(json.loads(pool_hosts))
    for owner, pool_name, name, path, size_gib, content in rows(Entity.VOLUME):
        if (owner, pool_name) in found:
            found[(owner, pool_name)].volumes.load(name, SimVolume(name, path, size_gib, content))
    return list(found.values())


def snapshots(rows: Rows) -> Iterator[tuple[str, SavedVolume]]:
    for handle, pool, volume, size_gib, content in rows(Entity.SNAPSHOT):
        yield handle, SavedVolume(pool, volume, size_gib, content)


def saved_memory(rows: Rows) -> Iterator[tuple[str, tuple[DomainSpec, str]]]:
    for handle, spec, memory in rows(Entity.MEMORY):
        yield handle, (spec_from_json(spec), memory)


def dirty_rates(rows: Rows) -> Iterator[tuple[str, float]]:
    for domain, rate in rows(Entity.DIRTY_RATE):
        yield domain, float(rate)


__all__ = ["SCHEMA", "TABLES", "Table", "spec_from_json", "spec_to_json"]
