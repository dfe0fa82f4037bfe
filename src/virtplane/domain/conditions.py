"""Typed condition vocabulary and pure helpers that keep last_transition_time honest."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from virtplane.domain.resources import Condition, ConditionStatus, VirtualMachineStatus


class VMCondition(StrEnum):
    READY = "Ready"
    SCHEDULED = "Scheduled"
    DISKS_READY = "DisksReady"
    START_FAILED = "StartFailed"
    MAINTENANCE = "Maintenance"
    HOST_REACHABLE = "HostReachable"
    RESTART_REQUIRED = "RestartRequired"
    MIGRATION = "Migration"
    MEMORY_RESTORED = "MemoryRestored"
    DEVICES_READY = "DevicesReady"  # a running VM's disks and NICs are those of its spec (hot-plug)


class HostCondition(StrEnum):
    DRIVER_LOADED = "DriverLoaded"  # False: the host's driver cannot load on the control plane
    ACCELERATOR = "Accelerator"  # what guests run under and why (domain.accelerators.AcceleratorReason)


def set_condition(
    conditions: list[Condition],
    type: str,
    status: bool | ConditionStatus,
    reason: str = "",
    message: str = "",
    *,
    now: datetime,
    generation: int = 0,
) -> list[Condition]:
    """``conditions`` with ``type`` set; the transition time moves only when the status flips."""
    value = (
        status
        if isinstance(status, ConditionStatus)
        else ConditionStatus.TRUE
        if status
        else ConditionStatus.FALSE
    )
    result = []
    found = False
    for cond in conditions:
        if cond.type != type:
            result.append(cond)
            continue
        found = True
        changed_at = cond.last_transition_time if cond.status == value else now
        result.append(
            Condition(
                type=type,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=changed_at,
                observed_generation=generation,
            )
        )
    if not found:
        result.append(
            Condition(
                type=type,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=generation,
            )
        )
    return result


def remove_condition(conditions: list[Condition], type: str) -> list[Condition]:
    return [c for c in conditions if c.type != type]


def get_condition(conditions: list[Condition], type: str) -> Condition | None:
    for cond in conditions:
        if cond.type == type:
            return cond
    return None


def place(status: VirtualMachineStatus, host: str, reason: str, *, now: datetime) -> None:
    """Record the VM on ``host`` together with the Scheduled condition that says so.

    With ``unplace``, the one writer of a VM's ``status.host``: every move (a placement, a live
    migration, a drain, a domain found elsewhere) goes through here, so the condition never
    names a host the VM has left (issue 39). ``reason`` says how it got there."""
    status.host = host
    status.conditions = set_condition(
        status.conditions, VMCondition.SCHEDULED, True, reason, f"placed on {host}", now=now
    )


def unplace(status: VirtualMachineStatus, reason: str, message: str, *, now: datetime) -> None:
    """Record the VM on no host (unschedulable, or released from a fenced one), saying why."""
    status.host = None
    status.conditions = set_condition(
        status.conditions, VMCondition.SCHEDULED, False, reason, message, now=now
    )
