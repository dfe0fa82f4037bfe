"""Migrations in flight: who asked for one, the slots they take, how ``begin`` answers.

A migration in flight is a VM whose ``virtplane.io/migration`` intent stands; the intent
names its requester (``maintenance/<host>`` or ``operation/<name>``), and the slots are
counted from the intents, so a slot stays taken for as long as the hypervisors run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import MigrationIntent, read_migration
from virtplane.domain.resources import ConditionStatus, VirtualMachine
from virtplane.drivers.base import MigrationJob
from virtplane.runtime.cache import Cache

__all__ = [
    "BeginResult",
    "FlightState",
    "Limits",
    "Refused",
    "Started",
    "Waiting",
    "completion_deadline_s",
    "failure_message",
    "in_flight",
    "maintenance_tag",
    "migration_ended",
    "operation_tag",
    "requesting_operation",
    "slot_refusal",
]


def maintenance_tag(host: str) -> str:
    return f"maintenance/{host}"


def operation_tag(operation: str) -> str:
    return f"operation/{operation}"


def requesting_operation(requested_by: str) -> str | None:
    """The operation an intent's ``requested_by`` names (None: maintenance asked)."""
    kind, _, owner = requested_by.partition("/")
    return owner if kind == "operation" else None


# --------------------------------------------------------------------------- outcomes of begin


@dataclass(frozen=True)
class Started:
    intent: MigrationIntent


@dataclass(frozen=True)
class Waiting:
    """No slot now (or the VM is not migratable yet); ask again later."""

    message: str


@dataclass(frozen=True)
class Refused:
    """This target (or this VM) cannot be used; the driver call, if any, failed at once."""

    message: str
    attempted: bool = False  # True when the intent was written and the driver refused


BeginResult = Started | Waiting | Refused


@dataclass
class FlightState:
    """What the coordinator remembers of a migration in flight (rebuilt after a restart)."""

    processed_mib: float = -1.0
    progress_at: datetime | None = None
    abort_reason: str = ""
    job: MigrationJob | None = None
    max_dirty_rate_mib_s: float | None = None
    post_copy_refused: bool = False  # the source would not switch: not asked again


@dataclass(frozen=True)
class Limits:
    outbound: int
    inbound: int
    cluster: int


def in_flight(cache: Cache) -> list[tuple[VirtualMachine, MigrationIntent]]:
    """The migrations under way: the VMs the cache indexes as carrying an intent, with it."""
    result = []
    for vm in cache.migrating_vms():
        intent = read_migration(vm.metadata.annotations)
        if intent is not None:
            result.append((vm, intent))
    return result


# --------------------------------------------------------------------------- pure helpers


def migration_ended(old: object, new: object) -> MigrationIntent | None:
    """The intent of a migration that ended with this change of a VM (finished, failed, or the
    VM went): its slot is free."""
    before = read_migration(old.metadata.annotations) if isinstance(old, VirtualMachine) else None
    after = read_migration(new.metadata.annotations) if isinstance(new, VirtualMachine) else None
    return before if before is not None and after is None else None


def slot_refusal(
    flights: list[MigrationIntent], source: str, target: str, cluster_of: dict[str, str], limits: Limits
) -> str:
    """Why a migration from ``source`` to ``target`` must wait for a slot, or "" if one is free."""
    outbound = sum(1 for f in flights if f.source == source)
    if outbound >= limits.outbound:
        return f"waiting for a migration slot: {outbound}/{limits.outbound} outbound from {source}"
    inbound = sum(1 for f in flights if f.target == target)
    if inbound >= limits.inbound:
        return f"waiting for a migration slot: {inbound}/{limits.inbound} inbound to {target}"
    cluster = cluster_of.get(source, "")
    in_cluster = sum(1 for f in flights if cluster_of.get(f.source, "") == cluster)
    if in_cluster >= limits.cluster:
        return f"waiting for a migration slot: {in_cluster}/{limits.cluster} in cluster {cluster}"
    return ""


def completion_deadline_s(memory_mib: int, copied_gib: int, per_gib_s: int) -> float:
    gib = memory_mib / 1024 + copied_gib
    return max(1.0, gib) * per_gib_s


def failure_message(vm: VirtualMachine) -> str:
    """Why the VM's last migration failed, as its Migration condition says."""
    cond = get_condition(vm.status.conditions, VMCondition.MIGRATION)
    return cond.message if cond is not None and cond.status is ConditionStatus.FALSE else "migration failed"
