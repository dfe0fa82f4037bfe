"""The state vocabulary: every set of domain states and VM phases a rule uses, named once.

Two vocabularies meet here:

- ``DomainState``: what a hypervisor says about a VM's domain. The drivers report it
  (they import it from here: the domain layer imports no driver).
- ``VMPhase`` (``domain.resources``): what the control plane shows for a VM.

The sets below differ on purpose, each from its neighbours by a member or two; every
one says which and why. Nothing outside this module spells out a set of states or
phases (``tests/domain/test_phases.py`` checks it); the operations' applicability
table (``domain.operations``) is the one other place that lists phases, because it
is the table of DESIGN.md §4.
"""

from __future__ import annotations

from enum import StrEnum

from virtplane.domain.resources import VMPhase

__all__ = [
    "ACTIVE_STATES",
    "ALLOCATED_PHASES",
    "COUNTED_PHASES",
    "IN_FLIGHT_STATES",
    "LIVE_PHASES",
    "LIVE_STATES",
    "MIGRATABLE_PHASES",
    "PLACED_PHASES",
    "RECOVERY_END_PHASES",
    "RESIDENT_STATES",
    "RESTORE_RUNNING_PHASES",
    "TRANSITION_PHASES",
    "UP_PHASES",
    "UP_STATES",
    "DomainState",
]


class DomainState(StrEnum):
    STARTING = "starting"  # booting (the sim models it; libvirt goes straight to running)
    RUNNING = "running"
    PAUSED = "paused"
    SHUTTING_DOWN = "shutting-down"
    SHUTOFF = "shutoff"
    CRASHED = "crashed"
    MIGRATING = "migrating"  # outgoing live migration in progress (still running here)
    INCOMING = "incoming"  # arriving by live migration: defined here, not running here yet


# --------------------------------------------------------------------------- domain states

IN_FLIGHT_STATES = frozenset({DomainState.MIGRATING, DomainState.INCOMING})
"""A live migration owns the domain: nothing stops or starts it until the migration ends."""

UP_STATES = IN_FLIGHT_STATES | {DomainState.RUNNING, DomainState.PAUSED}
"""The guest is up: a run policy that wants it running has nothing to start. Not Starting
(the boot is not over) and not ShuttingDown (it is on its way off)."""

LIVE_STATES = UP_STATES | {DomainState.STARTING}
"""The guest runs on this host, or is about to, and is not going away: where the VM is, when
a migration is followed or a domain that moved is looked for. A shutting-down domain is on
its way off, so it does not say where the VM lives."""

ACTIVE_STATES = LIVE_STATES | {DomainState.SHUTTING_DOWN}
"""The domain has a process on its host, a stopping one too: the power decision waits for
it to go (or forces it off) before it counts the VM as stopped."""

RESIDENT_STATES = ACTIVE_STATES - {DomainState.INCOMING}
"""The domain's process holds this host's vcpus and memory. An incoming migration's domain
does not yet, so during a live migration a VM is resident on its source only: more than one
resident host is a split brain (the simulator counts a host's load and checks this with it)."""


# --------------------------------------------------------------------------- VM phases

LIVE_PHASES = frozenset(
    {
        VMPhase.STARTING,
        VMPhase.RUNNING,
        VMPhase.PAUSED,
        VMPhase.MIGRATING,
        VMPhase.DEGRADED,
        VMPhase.STOPPING,
    }
)
"""The VM has a live domain on its host (every phase but Pending and Stopped): maintenance
must move or stop it before the host is empty, and a snapshot reaches its disks through that
host and records it as Running."""

UP_PHASES = LIVE_PHASES - {VMPhase.STOPPING}
"""Up and not on its way down: a domain that disappears from under such a VM vanished (one
that was Stopping was being stopped)."""

TRANSITION_PHASES = frozenset({VMPhase.STARTING, VMPhase.STOPPING, VMPhase.MIGRATING})
"""On the way to another phase (booting, stopping, moving): the VM controller looks again
soon, as no event may say when it got there. The settled live phases (Running, Paused,
Degraded) of ``LIVE_PHASES`` wait for an event or the resync."""

RESTORE_RUNNING_PHASES = UP_PHASES | {VMPhase.PENDING}
"""A restore records the power state Running for these (DESIGN.md §4: Running, Starting or
Pending; a paused, migrating or degraded guest is live too). Pending waits to run, so it
counts; Stopping does not, since a stop was under way."""

MIGRATABLE_PHASES = frozenset({VMPhase.RUNNING, VMPhase.PAUSED, VMPhase.DEGRADED})
"""A settled live domain the hypervisors can move: not Starting (not up yet), not Stopping,
not Migrating already. Wider than what an operator may ask a Migrate or Evict for (Running
only, the applicability table of §4): a paused guest on a host under maintenance must leave
too, and an operation's VM that paused after it was admitted still moves."""

ALLOCATED_PHASES = frozenset(VMPhase) - {VMPhase.STOPPED}
"""What a host shows as allocated (``status.allocated``), and what a fenced host's failure
ends: a VM that is not Stopped has, or is getting, a domain there."""

PLACED_PHASES = frozenset(VMPhase)
"""What placement counts against a host's room: every VM whose ``status.host`` names it,
Stopped ones too. A stopped VM keeps its host and starts there again without a new placement
check (only the host's state and connection are looked at), so its room stays held; this is
why placement counts more than ``ALLOCATED_PHASES``."""

RECOVERY_END_PHASES = frozenset({VMPhase.RUNNING, VMPhase.STOPPED})
"""A VM released from a fenced host ends its recovery, and frees its recovery slot, when its
power decision rests in one of these with nothing left to do: it runs elsewhere, or it is no
longer meant to run. Starting still holds the slot (the boot is what the slot limits)."""

COUNTED_PHASES = (
    VMPhase.RUNNING,
    VMPhase.STARTING,
    VMPhase.STOPPING,
    VMPhase.MIGRATING,
    VMPhase.PENDING,
    VMPhase.STOPPED,
)
"""The phases the dashboard counts even at zero, in this order (the others when present)."""
