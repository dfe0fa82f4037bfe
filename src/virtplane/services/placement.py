"""Where a VM could run now, and why: each host's verdict from the one placement engine.

A running VM is judged for a live migration, with the migration coordinator's own views
(``choose_target``: the room that migrations in flight hold on their targets), so what the
target picker offers is what a Migrate operation to that host would be told. A VM that does
not run is judged for a start (``scheduling.start_choice``, what its start would do). Either
way each host is chosen, ranked (score and why) or excluded (every reason, placement rules
by name). Read-only.
"""

from __future__ import annotations

from typing import Any

from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.scheduling import start_choice, vm_view
from virtplane.domain.errors import NotFound
from virtplane.domain.placement import Choice, HostVerdict
from virtplane.domain.resources import VirtualMachine, VMPhase

__all__ = ["PlacementService"]

CURRENT_HOST = "current host of the VM"


def _verdict(name: str, current: str | None, choice: Choice, found: HostVerdict | None) -> dict[str, Any]:
    if name == current:
        reasons: tuple[str, ...] = (CURRENT_HOST,)
    elif choice.blocked:
        reasons = (f"the VM cannot leave {choice.blocked}",)
    elif found is None:
        reasons = ("not judged",)
    else:
        reasons = found.reasons
    ranked = found is not None and not reasons
    verdict = "current" if name == current else "excluded" if not ranked else "ranked"
    if ranked and found is not None and found.rank == 1:
        verdict = "chosen"
    return {
        "host": name,
        "ok": not reasons,
        "reason": reasons[0] if reasons else "",
        "verdict": verdict,
        "reasons": list(reasons),
        "rank": found.rank if ranked and found else 0,
        "score": found.score if ranked and found else 0.0,
        "why": found.why if ranked and found else "",
        "broken_preferred": list(found.broken_preferred) if found else [],
    }


class PlacementService:
    def __init__(self, coordinator: MigrationCoordinator) -> None:
        self.coordinator = coordinator

    def migration_targets(self, vm_name: str, host: str | None = None) -> dict[str, Any]:
        """Per host (by name, or only ``host``): ``ok`` and, when not, the first reason, every
        reason, or its rank, score and why; the host the engine would pick; why the VM cannot
        leave its host, if it can't."""
        ctx = self.coordinator.ctx
        vm = ctx.read(VirtualMachine, vm_name)
        if vm is None:
            raise NotFound("NotFound", f"VM {vm_name} does not exist")
        names = sorted(h.metadata.name for h in ctx.cache.hosts())
        if host is not None and host not in names:
            raise NotFound("HostNotFound", f"host {host} does not exist; hosts: {', '.join(names) or 'none'}")
        migrating = vm.status.phase is VMPhase.RUNNING and vm.status.host is not None
        if migrating:
            choice = self.coordinator.choose_target(vm, explain=True)
        else:
            choice, _ = start_choice(ctx.cache, vm, ctx.promised, ctx.real_use(), explain=True)
        current = vm.status.host if migrating else None
        by_host = {v.host: v for v in choice.verdicts}
        hosts = [_verdict(n, current, choice, by_host.get(n)) for n in names if host in (None, n)]
        return {
            "vm": vm_name,
            "host": vm.status.host,
            "phase": vm.status.phase.value,
            "mode": "migration" if migrating else "start",
            "copy_storage": self.coordinator.needs_storage_copy(vm),
            "chosen": choice.host,
            "blocked": choice.blocked,
            "rules": [r.name for r in vm_view(ctx.cache, vm).rules],
            "hosts": hosts,
        }
