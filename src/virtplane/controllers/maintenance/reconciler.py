"""The maintenance controller: one reconcile per HostMaintenance (named after its host) runs
the cancel's steps and the drain's, as one chain (``controllers.chain``)."""

from __future__ import annotations

from virtplane.controllers.chain import Step, run_chain
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.maintenance.cancel import Cancel
from virtplane.controllers.maintenance.drain import Drain
from virtplane.controllers.maintenance.tracking import MaintenanceRun
from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.migration.flights import migration_ended
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.base import copied
from virtplane.domain.intents import read_migration
from virtplane.domain.resources import Host, HostMaintenance, MaintenancePhase, Resource, VirtualMachine
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache


class MaintenanceReconciler:
    """One look: the steps below, in order, over a ``MaintenanceRun``; a cancel's steps act on
    a cancelled maintenance, the drain's on the others."""

    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.steps: tuple[Step[MaintenanceRun], ...] = (
            *Cancel(ctx, coordinator).chain(),
            *Drain(ctx, coordinator).chain(),
        )

    async def __call__(self, req: Request) -> Result | None:
        m = self.ctx.read(HostMaintenance, req.name)
        if m is None or m.spec.dry_run:
            return None
        asked = m.status.observed_generation != m.metadata.generation and not m.spec.cancel
        if m.status.phase is MaintenancePhase.CANCELLED and not asked:
            return None
        m = copied(m)  # the steps change it
        host = self.ctx.read(Host, m.spec.host)
        if host is None:
            if m.status.phase is not MaintenancePhase.FAILED:
                m.status.phase = MaintenancePhase.FAILED
                m.status.message = f"host {m.spec.host} does not exist"
                await self.ctx.write(m)
            return None
        result, _ = await run_chain(self.steps, MaintenanceRun(m, host, asked))
        return result


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
