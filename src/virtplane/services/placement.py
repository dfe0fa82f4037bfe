"""Where a VM could be live-migrated now: each host's verdict and reason, for a target picker.

The verdicts are the migration coordinator's own (``choose_target``: the same views, with the
room that migrations in flight hold on their targets, and the same pure ``choose_host``), so
what the picker offers is what a Migrate operation to that host would be told. Read-only.
"""

from __future__ import annotations

from typing import Any

from virtplane.controllers.migration import MigrationCoordinator
from virtplane.domain.errors import NotFound
from virtplane.domain.resources import VirtualMachine

__all__ = ["PlacementService"]

CURRENT_HOST = "current host of the VM"


class PlacementService:
    def __init__(self, coordinator: MigrationCoordinator) -> None:
        self.coordinator = coordinator

    def migration_targets(self, vm_name: str) -> dict[str, Any]:
        """Per host (by name): ``ok`` and, when not, the first rule it fails; the host that a
        Migrate without a target would pick; and why the VM cannot leave its host, if it can't."""
        ctx = self.coordinator.ctx
        vm = ctx.read(VirtualMachine, vm_name)
        if vm is None:
            raise NotFound("NotFound", f"VM {vm_name} does not exist")
        choice = self.coordinator.choose_target(vm)
        hosts = []
        for host in sorted(h.metadata.name for h in ctx.cache.hosts()):
            if host == vm.status.host:
                reason: str | None = CURRENT_HOST
            elif choice.blocked:
                reason = f"the VM cannot leave {choice.blocked}"
            else:
                reason = choice.reasons.get(host)
            hosts.append({"host": host, "ok": reason is None, "reason": reason or ""})
        return {
            "vm": vm_name,
            "host": vm.status.host,
            "phase": vm.status.phase.value,
            "copy_storage": self.coordinator.needs_storage_copy(vm),
            "chosen": choice.host,
            "blocked": choice.blocked,
            "hosts": hosts,
        }
