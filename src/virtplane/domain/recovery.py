"""What happens to a VM whose host failed (DESIGN.md §3, row "host down"), and in what order.

``RECOVERY`` is the one table: run policy x storage kind x host liveness -> what to do.
Only a Down host (fenced: confirmed powered off) releases its VMs; until then every VM
waits, because a host that merely does not answer may still run them. A VM with a disk
on a host's local storage waits for that host whatever happens (its disk is there).

``admitted`` is the per-cluster rate limit with the priority order: at most ``limit``
recoveries of one cluster are starting at once (a slot is held from the start until
the VM runs), and the waiting VMs take free slots by priority (higher first), then by
name, so that the order is the same on every look.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import assert_never

from virtplane.domain.resources import HostConnection, RunPolicy

__all__ = ["RECOVERY", "Candidate", "Recovery", "StorageKind", "admitted", "queue_position", "recovery"]


class StorageKind(StrEnum):
    SHARED = "shared"
    """Every disk is on shared storage (or the VM has none): it can run on another host."""
    LOCAL = "local"
    """A disk is on the failed host's local storage: the VM cannot run anywhere else."""


class Recovery(StrEnum):
    RESTART_ELSEWHERE = "RestartElsewhere"
    """Released from the host; starts on another Enabled host with room, once, in its turn."""
    STAY_STOPPED = "StayStopped"
    """Released from the host; stays Stopped with exit reason host-failure."""
    WAIT = "Wait"
    """Stays recorded on its host, untouched, until the host answers or is fenced."""


def _when_down(policy: RunPolicy, storage: StorageKind) -> Recovery:
    """A VM of a Down (fenced) host: one with a local disk waits for it; the rest as the policy says."""
    if storage is StorageKind.LOCAL:
        return Recovery.WAIT
    match policy:
        case RunPolicy.ALWAYS_ON | RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY:
            return Recovery.RESTART_ELSEWHERE
        case RunPolicy.MANUAL | RunPolicy.ALWAYS_OFF:
            return Recovery.STAY_STOPPED
        case _:
            assert_never(policy)


RECOVERY: Mapping[tuple[RunPolicy, StorageKind, HostConnection], Recovery] = MappingProxyType(
    {
        (policy, storage, liveness): (
            _when_down(policy, storage) if liveness is HostConnection.DOWN else Recovery.WAIT
        )
        for policy in RunPolicy
        for storage in StorageKind
        for liveness in HostConnection
    }
)


def recovery(policy: RunPolicy, storage: StorageKind, liveness: HostConnection) -> Recovery:
    return RECOVERY[(policy, storage, liveness)]


@dataclass(frozen=True)
class Candidate:
    """A VM of the cluster waiting for a recovery slot."""

    name: str
    priority: int = 0


def _order(waiting: Iterable[Candidate]) -> list[Candidate]:
    return sorted(waiting, key=lambda c: (-c.priority, c.name))


def admitted(waiting: Iterable[Candidate], starting: int, limit: int) -> frozenset[str]:
    """The waiting VMs that may start now: the first ``limit - starting`` in priority order."""
    free = max(0, limit - starting)
    return frozenset(c.name for c in _order(waiting)[:free])


def queue_position(waiting: Iterable[Candidate], name: str) -> int:
    """How many waiting VMs go before ``name`` (0: it is next)."""
    names = [c.name for c in _order(waiting)]
    return names.index(name) if name in names else len(names)
