"""The maintenance plan from what the cache holds now: for the reconciler, and for the API's
dry run and answers (no writes, no driver calls)."""

from __future__ import annotations

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.migration.coordinator import policy_of
from virtplane.controllers.scheduling import host_views, vm_view
from virtplane.domain.maintenance_plan import Plan, PlanVM, plan_maintenance
from virtplane.domain.migration_policy import convergence_risk
from virtplane.domain.phases import LIVE_PHASES
from virtplane.domain.resources import LiveMigrationPolicy, MaintenanceStrategy, VirtualMachine

__all__ = ["compute_plan", "plan_vm", "strategy_of"]


def strategy_of(ctx: ControllerContext, requested: MaintenanceStrategy | None) -> MaintenanceStrategy:
    """The requested strategy, else the setting host.maintenance.local.storage.strategy."""
    if requested is not None:
        return requested
    return MaintenanceStrategy(ctx.settings.get_str("host.maintenance.local.storage.strategy"))


def plan_vm(ctx: ControllerContext, vm: VirtualMachine) -> PlanVM:
    view = vm_view(ctx.cache, vm)
    return PlanVM(
        vm=view,
        running=vm.status.phase in LIVE_PHASES,
        has_local_disks=bool(view.local_disks_gib),
        migratable=vm.spec.live_migration_policy is LiveMigrationPolicy.ALLOWED,
        convergence_risk=convergence_risk(policy_of(ctx, vm), vm.status.migration_dirty_rate_mib_s),
    )


def compute_plan(
    ctx: ControllerContext, host: str, strategy: MaintenanceStrategy, vms: list[VirtualMachine] | None = None
) -> Plan:
    """The plan for draining ``host`` now, from the cache."""
    vms = ctx.cache.vms_on_host(host) if vms is None else vms
    return plan_maintenance(
        host, [plan_vm(ctx, vm) for vm in vms], host_views(ctx.cache, ctx.promised), strategy
    )
