"""The maintenance controller: one reconcile per HostMaintenance (named after its host)
dispatches to the cancel, a new request, or the drain under way."""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.maintenance.cancel import Cancel
from virtplane.controllers.maintenance.drain import Drain
from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.migration.flights import migration_ended
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.intents import read_migration
from virtplane.domain.resources import Host, HostMaintenance, MaintenancePhase, Resource, VirtualMachine
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache


class MaintenanceReconciler:
    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.draining = Drain(ctx, coordinator)
        self.cancelling = Cancel(ctx, coordinator)

    async def __call__(self, req: Request) -> Result | None:
        m = self.ctx.store.find(HostMaintenance, req.name)
        if m is None or m.spec.dry_run:
            return None
        asked = m.status.observed_generation != m.metadata.generation and not m.spec.cancel
        if m.status.phase is MaintenancePhase.CANCELLED and not asked:
            return None
        host = self.ctx.store.find(Host, m.spec.host)
        if host is None:
            if m.status.phase is not MaintenancePhase.FAILED:
                m.status.phase = MaintenancePhase.FAILED
                m.status.message = f"host {m.spec.host} does not exist"
                await self.draining.save(m)
            return None
        if m.spec.cancel:
            return await self.cancelling.step(m, host)
        if asked:
            return await self.draining.start(m, host)
        if m.status.phase is MaintenancePhase.DRAINING:
            return await self.draining.step(m, host)
        return None


# --------------------------------------------------------------------------- watches


def _maintenances_of_its_hosts(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A VM left, reached or moves between hosts: their maintenances look again."""
    hosts: set[str] = set()
    for vm in (old, new):
        if not isinstance(vm, VirtualMachine):
            continue
        if vm.status.host:
            hosts.add(vm.status.host)
        intent = read_migration(vm.metadata.annotations)
        if intent is not None:
            hosts |= {intent.source, intent.target}
    maintenances = set(cache.names(HostMaintenance.KIND))
    return [Request(HostMaintenance.KIND, h) for h in sorted(hosts & maintenances)]


def _every_maintenance(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    return [Request(HostMaintenance.KIND, m) for m in sorted(cache.names(HostMaintenance.KIND))]


def _every_maintenance_when_a_slot_frees(
    cache: Cache, old: Resource | None, new: Resource | None
) -> list[Request]:
    """A migration ended: a drain waiting for a slot may go on."""
    return _every_maintenance(cache, old, new) if migration_ended(old, new) is not None else []


WATCHES = (
    itself(HostMaintenance.KIND),
    Watch(VirtualMachine.KIND, _maintenances_of_its_hosts),
    Watch(VirtualMachine.KIND, _every_maintenance_when_a_slot_frees),
    # any host change: a target's room, state or connection, or the host itself
    Watch(Host.KIND, _every_maintenance),
)
