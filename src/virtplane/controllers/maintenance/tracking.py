"""What draining and cancelling share: the state one look works on (``MaintenanceRun``), each
VM's progress in the maintenance's status, the host's state moves (through
``domain.host_states``), and saving the maintenance."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from virtplane.controllers.context import Change, ControllerContext
from virtplane.controllers.migration import MigrationCoordinator, failure_message, maintenance_tag
from virtplane.domain.conditions import set_condition
from virtplane.domain.host_states import HostEvent, InvalidTransition, in_maintenance, next_state
from virtplane.domain.intents import read_migration
from virtplane.domain.progress import MoveEvent, MoveProgress, ProgressState, advance, observed
from virtplane.domain.resources import (
    Host,
    HostMaintenance,
    HostResourceState,
    MaintenanceVMProgress,
    VirtualMachine,
)

log = logging.getLogger("virtplane.controllers.maintenance")

POLL_S = 1.0
HOST_CONDITION = "Maintenance"


@dataclass
class MaintenanceRun:
    """One look at a maintenance: the steps of the chain read and change this, and save ``m``."""

    m: HostMaintenance
    host: Host
    asked: bool
    """A new or repeated request (its generation not yet observed), not a cancel."""
    running: list[str] = field(default_factory=list)
    """The drain's survey: the VMs still live on the host (moving or not)."""
    to_move: list[tuple[VirtualMachine, MoveProgress]] = field(default_factory=list)
    """The live VMs the drain acts on this look, with their progress."""
    in_flight: list[str] = field(default_factory=list)
    inbound: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.host.metadata.name


def progress_of(m: HostMaintenance, vm: str) -> MoveProgress:
    stored = m.status.progress.get(vm)
    return MoveProgress.of(stored.model_dump() if stored is not None else None)


def _move(host: Host, event: HostEvent, message: str, now: datetime) -> None:
    """``host`` moved by ``event`` through the state table, its Maintenance condition with it."""
    host.status.resource_state = next_state(host.status.resource_state, event)
    host.status.conditions = set_condition(
        host.status.conditions,
        HOST_CONDITION,
        in_maintenance(host.status.resource_state),
        host.status.resource_state.value,
        message,
        now=now,
    )


def record(m: HostMaintenance, vm: str, progress: MoveProgress) -> MoveProgress:
    m.status.progress[vm] = MaintenanceVMProgress.model_validate(progress.as_dict())
    return progress


class Tracker:
    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.coordinator = coordinator

    def _host_state(self, run: MaintenanceRun) -> HostResourceState:
        """The host's state now: this look's own moves included (the cache holds every write of
        this process before the writer resumes)."""
        host = self.ctx.read(Host, run.name)
        return (host or run.host).status.resource_state

    async def _transition(self, run: MaintenanceRun, event: HostEvent, message: str, point: str) -> None:
        """Durable point ``point``: the host moved through the state table (an event its state
        does not take is skipped)."""
        host = self.ctx.read(Host, run.name) or run.host
        if self._announce(host, event, message):
            now = self.ctx.now()
            await self.ctx.durable(
                point, Change(Host, run.name, lambda current: _move(current, event, message, now))
            )

    def _announce(self, host: Host, event: HostEvent, message: str) -> bool:
        """Record the host's move by ``event`` (the host's next write carries it); False when
        its state does not take the event."""
        before = host.status.resource_state
        try:
            after = next_state(before, event)
        except InvalidTransition as exc:
            log.info("host %s: %s", host.metadata.name, exc)
            return False
        if after != before:
            self.ctx.event(
                host,
                after.value,
                f"{before.value} -> {after.value}: {message}",
                warning=after
                in (
                    HostResourceState.ERROR_IN_MAINTENANCE,
                    HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE,
                ),
            )
        return True

    async def save_moving(
        self, m: HostMaintenance, moves: Sequence[tuple[HostEvent, str]], *, durable: str = ""
    ) -> HostMaintenance:
        """Save the maintenance and move its host by ``moves``, in one transaction: whoever reads
        either sees the other (between two commits a reader saw a host in ErrorInMaintenance
        beside its maintenance's last progress, still Migrating, and a maintenance Failed beside
        a host still in PrepareForMaintenance). The host is read again where another writer (its
        own controller) came first. ``durable``: the durable point this write is, if any."""
        if not moves:  # most looks of a drain: no read of the host
            return await self.save(m, durable=durable)
        host, now = self.ctx.read(Host, m.spec.host, to_change=True), self.ctx.now()
        assert host is not None
        taken = []
        for event, message in moves:  # each from where the one before left the host
            if self._announce(host, event, message):
                _move(host, event, message, now)
                taken.append((event, message))
        if not taken:
            return await self.save(m, durable=durable)

        def move(current: Host) -> None:
            for event, message in taken:
                _move(current, event, message, now)

        change = Change(Host, m.spec.host, move)
        written, _ = await (self.ctx.durable(durable, m, change) if durable else self.ctx.write(m, change))
        return written

    async def save(self, m: HostMaintenance, *, durable: str = "") -> HostMaintenance:
        return await (self.ctx.durable(durable, m) if durable else self.ctx.write(m))

    def _advance(self, m: HostMaintenance, vm: str, event: MoveEvent) -> MoveProgress:
        max_attempts = self.ctx.settings.get_int("migration.max_attempts")
        return record(m, vm, advance(progress_of(m, vm), event, max_attempts=max_attempts))

    def _observe(self, m: HostMaintenance, vm: VirtualMachine) -> MoveProgress:
        """Bring the VM's progress up to date with the VM itself (intent, host, condition)."""
        name = vm.metadata.name
        host = m.spec.host
        before = progress_of(m, name)
        intent = read_migration(vm.metadata.annotations)
        flight = None
        if intent is not None and intent.requested_by == maintenance_tag(host):
            flight = self.coordinator.in_flight(name, intent, returning=intent.target == host)
        max_attempts = self.ctx.settings.get_int("migration.max_attempts")
        after = observed(before, flight, vm.status.host, failure_message(vm), max_attempts=max_attempts)
        if after.state is not before.state and flight is None:
            if after.state is ProgressState.MIGRATED and after.target:
                m.status.migrated_vms[name] = after.target
                self.ctx.event(("Host", host), "VMMigrated", f"{name} moved to {after.target}")
            else:
                self.ctx.event(("Host", host), "VMMigrationFailed", f"{name}: {after.message}", warning=True)
        return record(m, name, after)

    def _departed(self, m: HostMaintenance) -> list[VirtualMachine]:
        """VMs whose migration off the host was under way and that are no longer on it."""
        result = []
        for vm_name, progress in m.status.progress.items():
            vm = self.ctx.read(VirtualMachine, vm_name)
            if vm is not None and progress.state is ProgressState.MIGRATING and vm.status.host != m.spec.host:
                result.append(vm)
        return result
