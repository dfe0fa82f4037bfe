"""The maintenance controller: one reconcile per HostMaintenance (named after its host)
dispatches to the cancel, a new request, or the drain under way."""

from __future__ import annotations

from typing import Any

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.maintenance.cancel import Cancel
from virtplane.controllers.maintenance.drain import Drain
from virtplane.controllers.migration import MigrationCoordinator
from virtplane.domain.intents import read_migration
from virtplane.domain.resources import Host, HostMaintenance, MaintenancePhase, VirtualMachine
from virtplane.reconcile.types import Request, Result


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
                self.draining.save(m)
            return None
        if m.spec.cancel:
            return await self.cancelling.step(m, host)
        if asked:
            return self.draining.start(m, host)
        if m.status.phase is MaintenancePhase.DRAINING:
            return await self.draining.step(m, host)
        return None


def wake_on_change(cache: Any, kind: str, old: Any, new: Any) -> list[tuple[str, str]]:
    """Keys to look at again after a cache change: migrations in flight, maintenances of hosts
    a VM left, reached or moves between, and every maintenance when a host changed (room,
    state or connection of a target)."""
    keys: list[tuple[str, str]] = []
    maintenances = set(cache.names(HostMaintenance.KIND))
    if kind == "VirtualMachine":
        hosts: set[str] = set()
        for vm in (old, new):
            if not isinstance(vm, VirtualMachine):
                continue
            if vm.status.host:
                hosts.add(vm.status.host)
            intent = read_migration(vm.metadata.annotations)
            if intent is not None:
                keys.append(("Migration", vm.metadata.name))
                hosts |= {intent.source, intent.target}
        keys += [(HostMaintenance.KIND, h) for h in sorted(hosts & maintenances)]
    elif kind == "Host":
        keys += [(HostMaintenance.KIND, m) for m in sorted(maintenances)]
    return keys
