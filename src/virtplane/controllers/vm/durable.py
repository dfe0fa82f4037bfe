"""The writes of a VM reconcile that must land before a side effect: its durable points.

A reconcile computes the VM's status on a copy and writes it once, at the end. Only
where a driver call follows that a crash must not be able to forget is the copy made
durable first: these points, each with the crash point (``VIRTPLANE_CRASH_AT``) that
kills the server right after it, so a test can prove the step is crash safe.

DESIGN.md §1: intent is durable before any destructive step.
"""

from __future__ import annotations

from enum import StrEnum


class DurablePoint(StrEnum):
    DEFINE = "define"
    """Before a missing domain is defined again: the finalizer (so a deletion removes the
    domain) and the intents read so far. Crash point after the define: vm.domain-recreated."""

    START = "start"
    """Before a start: the placement (status.host: the domain is defined on that host, and
    its room counts there), the start attempt with the time of the next retry, the intents
    the decision consumed (a restore's power state becomes a start request) and the phase.
    Crash point: vm.before-start."""

    COLD_BOOT = "cold-boot"
    """Before a cold boot that replaces a resume from a snapshot's memory: the dropped
    resume intent, so the image is never resumed later over a guest that booted."""

    SEED = "seed"
    """Before a seed file is written to a host: the file, on the VM's record of its seeds
    (``domain.seeds``), so it is deleted when no longer used, or with the VM. Crash point
    after the upload: vm.seed-written."""

    DETACH = "detach"
    """Before a device is asked back from a running guest: the change, on
    ``status.device_changes`` with its start, so the wait for the guest and its timeout
    survive a restart of the control plane."""

    STOP = "stop"
    """Before a shutdown or power-off: the stop intent and the exit reason it will record."""

    PLACED = "placed"
    """A placement whose host does not answer yet: the VM on that host (its room counts there)
    and its Scheduled condition, so the start that follows once the host answers goes there and
    nowhere else. Crash point: vm.placed."""

    RECOVERY_SLOT = "recovery-slot"
    """A VM released from a fenced host takes one of its cluster's recovery slots, before
    anything else can count the slots. Crash point: vm.recovery-slot-taken."""

    FINALIZER_REMOVED = "finalizer-removed"
    """A deleted VM's domain and seeds are gone: its finalizer off, before its row goes.
    Crash point: vm.finalizer-removed."""


CRASH_POINTS: dict[DurablePoint, str] = {
    DurablePoint.DEFINE: "vm.domain-recreated",
    DurablePoint.START: "vm.before-start",
    DurablePoint.SEED: "vm.seed-written",
}
"""The crash points that follow a durable point's side effect (crashpoints.POINTS lists them all)."""

AFTER_WRITE: dict[DurablePoint, str] = {
    DurablePoint.PLACED: "vm.placed",
    DurablePoint.RECOVERY_SLOT: "vm.recovery-slot-taken",
    DurablePoint.FINALIZER_REMOVED: "vm.finalizer-removed",
}
"""The crash points right after a durable point's write (no side effect of the VM controller's
own follows it in the same look)."""

__all__ = ["AFTER_WRITE", "CRASH_POINTS", "DurablePoint"]
