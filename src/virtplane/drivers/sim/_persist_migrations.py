"""The ``migrations`` table of the state file: the migration jobs, one row per domain.

A row holds what a migration needs to go on in another process: source and target,
bandwidth, memory, the disks to copy, the injected fault, the progress so far (the
fields ``Migration.advance`` works on), the room it holds on the target, and the
clock's time of its last tick, and its ``policy`` (a JSON object: auto-converge and its
throttle, post-copy allowed and switched, the maximum downtime, the dirty rate last seen;
added in schema 4, ``{}`` in older rows: none of it), from which a later process counts the ticks that passed
while none ran. Every tick rewrites the row, in the tick's own transaction, so that
progress stored and time stored always belong together. A completed job has no row.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from virtplane.drivers.base import MigrationPhase

from ._changes import Key
from ._precopy import DiskCopy, InjectedFault, Migration

if TYPE_CHECKING:
    from ._host import SimHost

SCHEMA = """
CREATE TABLE IF NOT EXISTS migrations (
    domain TEXT PRIMARY KEY,
    vm_uid TEXT NOT NULL,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    bandwidth_mib_s REAL NOT NULL,
    memory_mib REAL NOT NULL,
    disks TEXT NOT NULL,
    fault TEXT,
    phase TEXT NOT NULL,
    error TEXT NOT NULL,
    processed_mib REAL NOT NULL,
    disk_remaining_mib REAL NOT NULL,
    iteration INTEGER NOT NULL,
    iteration_remaining_mib REAL NOT NULL,
    iteration_seconds REAL NOT NULL,
    stalled INTEGER NOT NULL,
    reserved_vcpus INTEGER NOT NULL,
    reserved_memory_mib INTEGER NOT NULL,
    progressed_at REAL NOT NULL,
    policy TEXT NOT NULL DEFAULT '{}'
);
"""

COLUMNS = (
    "domain",
    "vm_uid",
    "source",
    "target",
    "bandwidth_mib_s",
    "memory_mib",
    "disks",
    "fault",
    "phase",
    "error",
    "processed_mib",
    "disk_remaining_mib",
    "iteration",
    "iteration_remaining_mib",
    "iteration_seconds",
    "stalled",
    "reserved_vcpus",
    "reserved_memory_mib",
    "progressed_at",
    "policy",
)


def row(_key: Key, migration: Migration) -> tuple[Any, ...] | None:
    """The row of a job, or None when it has none to keep."""
    if migration.phase is MigrationPhase.COMPLETED:
        return None
    return (
        migration.domain,
        migration.vm_uid,
        migration.source.name,
        migration.target.name,
        migration.bandwidth_mib_s,
        migration.memory_mib,
        json.dumps([dataclasses.asdict(disk) for disk in migration.disks]),
        None if migration.fault is None else str(migration.fault),
        str(migration.phase),
        migration.error,
        migration.processed_mib,
        migration.disk_remaining_mib,
        migration.iteration,
        migration.iteration_remaining_mib,
        migration.iteration_seconds,
        int(migration.stalled),
        *migration.reserved,
        migration.progressed_at,
        json.dumps(
            {
                "auto_converge": migration.auto_converge,
                "post_copy_allowed": migration.post_copy_allowed,
                "post_copy": migration.post_copy,
                "max_downtime_ms": migration.max_downtime_ms,
                "throttle_pct": migration.throttle_pct,
                "dirty_rate_mib_s": migration.dirty_rate_mib_s,
            }
        ),
    )


def load(rows: Iterable[tuple[Any, ...]], host_named: Callable[[str], SimHost | None]) -> list[Migration]:
    """Rebuild the jobs of the rows (those between hosts that still exist)."""
    migrations = []
    for (
        domain,
        vm_uid,
        source_name,
        target_name,
        bandwidth,
        memory,
        disks,
        fault,
        phase,
        error,
        processed,
        disk_remaining,
        iteration,
        iteration_remaining,
        iteration_seconds,
        stalled,
        reserved_vcpus,
        reserved_memory,
        progressed_at,
        policy_json,
    ) in rows:
        source, target = host_named(source_name), host_named(target_name)
        if source is None or target is None:
            continue
        policy = json.loads(policy_json)
        migration = Migration(
            domain=domain,
            vm_uid=vm_uid,
            source=source,
            target=target,
            bandwidth_mib_s=bandwidth,
            memory_mib=memory,
            disks=tuple(DiskCopy(**disk) for disk in json.loads(disks)),
            fault=None if fault is None else InjectedFault(fault),
            auto_converge=bool(policy.get("auto_converge", False)),
            post_copy_allowed=bool(policy.get("post_copy_allowed", False)),
            max_downtime_ms=policy.get("max_downtime_ms"),
        )
        migration.post_copy = bool(policy.get("post_copy", False))
        migration.throttle_pct = int(policy.get("throttle_pct", 0))
        migration.dirty_rate_mib_s = float(policy.get("dirty_rate_mib_s", 0.0))
        migration.phase = MigrationPhase(phase)
        migration.error = error
        migration.processed_mib = processed
        migration.disk_remaining_mib = disk_remaining
        migration.iteration = iteration
        migration.iteration_remaining_mib = iteration_remaining
        migration.iteration_seconds = iteration_seconds
        migration.stalled = bool(stalled)
        migration.reserved = (reserved_vcpus, reserved_memory)
        migration.progressed_at = progressed_at
        migrations.append(migration)
    return migrations
