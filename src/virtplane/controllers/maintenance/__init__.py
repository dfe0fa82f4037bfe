"""Host maintenance (DESIGN.md §5): plan, drain, hold, cancel.

The API's requests go through ``services.maintenance``, which writes the ``HostMaintenance``
spec (named after its host). ``MaintenanceReconciler`` writes its status and owns the host's
maintenance states; every move goes through ``domain.host_states.next_state``:

1. A new request (or a repeated one, which bumps ``spec.request``): AskMaintenance, the
   plan (``domain.maintenance_plan.plan_maintenance`` over the scheduling views) is
   computed again and stored before anything moves. A plan with blocked VMs
   (strategy Error, no target) touches nothing: the host goes to ErrorInMaintenance
   and ``status.blocking`` names the VMs.
2. Draining: each running VM is live-migrated (with its local disks under strategy
   Migration) through the ``MigrationCoordinator``, or stopped (Stop, ForceStop). A VM
   that maintenance stops gets its power intent on the VM *before* the stop
   (maintenance_power_state=Running, a stop by the system, held_by=maintenance/<host>).
   A failed attempt is retried on another target (ErrorInPrepareForMaintenance meanwhile);
   when a VM's attempts are used up or no target is left, the drain ends once nothing is
   in flight: ErrorInMaintenance, the VM still running where it was.
3. No running VM left and nothing inbound: Maintenance.
4. Cancel: nothing new is scheduled, in-flight migrations end (finish, or abort on their
   timeouts), the host returns to Enabled, the VMs maintenance stopped are released and
   start again; with ``host.maintenance.return_vms`` the VMs that left are migrated back
   when there is room.

Modules: ``plan`` (the plan from the cache, also for the API), ``tracking`` (per-VM progress
and the host's state moves), ``drain`` (1-3), ``cancel`` (4), ``reconciler`` (their steps as one chain).
"""

from virtplane.controllers.maintenance.plan import compute_plan, strategy_of
from virtplane.controllers.maintenance.reconciler import WATCHES, MaintenanceReconciler
from virtplane.controllers.registration import Registration
from virtplane.domain.resources import HostMaintenance

CONTROLLER = Registration(
    HostMaintenance.KIND, lambda parts: MaintenanceReconciler(parts.ctx, parts.migrations), WATCHES, workers=2
)

__all__ = ["CONTROLLER", "WATCHES", "MaintenanceReconciler", "compute_plan", "strategy_of"]
