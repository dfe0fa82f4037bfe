"""Host maintenance (DESIGN.md §5): plan, drain, hold, cancel.

``MaintenanceService`` is what the API calls: it checks a request, computes the plan
(``domain.maintenance_plan.plan_maintenance`` over the scheduling views) and writes the
``HostMaintenance`` object, named after its host. A dry run only computes the plan.

``MaintenanceReconciler`` owns the host's maintenance states; every move goes through
``domain.host_states.next_state``:

1. A new request (or a repeated one, which bumps ``spec.request``): AskMaintenance, the
   plan is computed again and stored before anything moves. A plan with blocked VMs
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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.migration import (
    MIGRATABLE_PHASES,
    MigrationCoordinator,
    Refused,
    Started,
    Waiting,
    failure_message,
    in_flight,
    maintenance_tag,
)
from virtplane.controllers.scheduling import host_views, vm_view
from virtplane.domain.conditions import set_condition
from virtplane.domain.host_states import HostEvent, InvalidTransition, in_maintenance, next_state
from virtplane.domain.intents import (
    PowerState,
    StopMode,
    read_intents,
    read_migration,
    write_intents,
)
from virtplane.domain.maintenance_plan import Plan, PlanAction, PlanItem, PlanVM, Strategy, plan_maintenance
from virtplane.domain.resources import (
    Host,
    HostMaintenance,
    HostMaintenanceSpec,
    HostMaintenanceStatus,
    HostResourceState,
    LiveMigrationPolicy,
    MaintenancePhase,
    MaintenancePlanItem,
    MaintenanceStrategy,
    MaintenanceVMProgress,
    Metadata,
    VirtualMachine,
    VMPhase,
)
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.maintenance")

POLL_S = 1.0
HOST_CONDITION = "Maintenance"
RUNNING_PHASES = frozenset(
    {VMPhase.RUNNING, VMPhase.STARTING, VMPhase.PAUSED, VMPhase.MIGRATING, VMPhase.DEGRADED, VMPhase.STOPPING}
)
"""Phases in which a VM still has a live domain on its host."""
ACTIVE_PHASES = frozenset(
    {
        MaintenancePhase.DRAINING,
        MaintenancePhase.COMPLETED,
        MaintenancePhase.FAILED,
        MaintenancePhase.CANCELLING,
    }
)
_UNFINISHED = frozenset({"Pending", "WaitingForSlot", "Migrating", "Retrying", "Stopping", "Returning"})


class MaintenanceRefused(Exception):
    """A request the maintenance service turns down; the API maps it to an HTTP error."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _strategy(ctx: ControllerContext, requested: MaintenanceStrategy | None) -> MaintenanceStrategy:
    if requested is not None:
        return requested
    return MaintenanceStrategy(ctx.settings.get_str("host.maintenance.local.storage.strategy"))


def plan_vm(ctx: ControllerContext, vm: VirtualMachine) -> PlanVM:
    view = vm_view(ctx.cache, vm)
    return PlanVM(
        vm=view,
        running=vm.status.phase in RUNNING_PHASES,
        has_local_disks=bool(view.local_disks_gib),
        migratable=vm.spec.live_migration_policy is LiveMigrationPolicy.ALLOWED,
    )


def compute_plan(
    ctx: ControllerContext, host: str, strategy: MaintenanceStrategy, vms: list[VirtualMachine] | None = None
) -> Plan:
    """The plan for draining ``host`` now, from the cache (no writes, no driver calls)."""
    vms = ctx.cache.vms_on_host(host) if vms is None else vms
    return plan_maintenance(
        host, [plan_vm(ctx, vm) for vm in vms], host_views(ctx.cache), Strategy(strategy.value)
    )


def _items(plan: Plan) -> list[MaintenancePlanItem]:
    return [
        MaintenancePlanItem(vm=i.vm, action=i.action.value, target=i.target, reason=i.reason)
        for i in plan.items
    ]


def view(maintenance: HostMaintenance, host: Host | None) -> dict[str, Any]:
    """The maintenance as the API shows it (the CLI reads ``plan.items`` and ``progress``)."""
    status = maintenance.status
    blocked = [i.vm for i in status.plan if i.action == PlanAction.BLOCKED.value]
    return {
        "host": maintenance.spec.host,
        "phase": status.phase.value,
        "host_state": host.status.resource_state.value if host else None,
        "strategy": (status.strategy or maintenance.spec.strategy or MaintenanceStrategy.ERROR).value,
        "requested_strategy": maintenance.spec.strategy.value if maintenance.spec.strategy else None,
        "dry_run": maintenance.spec.dry_run,
        "cancel": maintenance.spec.cancel,
        "plan": {
            "feasible": not blocked,
            "items": [i.model_dump(mode="json") for i in status.plan],
        },
        "progress": {vm: p.model_dump(mode="json") for vm, p in sorted(status.progress.items())},
        "stopped_vms": list(status.stopped_vms),
        "migrated_vms": dict(status.migrated_vms),
        "blocking": list(status.blocking),
        "message": status.message,
        "started_at": status.started_at.isoformat() if status.started_at else None,
        "finished_at": status.finished_at.isoformat() if status.finished_at else None,
        "resource_version": maintenance.metadata.resource_version,
    }


# --------------------------------------------------------------------------- the API side


class MaintenanceService:
    """Requests from the API: plan, start (or retry), show and cancel a host's maintenance."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def _host(self, name: str) -> Host:
        host = self.ctx.cache.host(name) or self.ctx.store.find(Host, name)
        if host is None:
            raise MaintenanceRefused(404, "NotFound", f"host {name} does not exist")
        return host

    def request(
        self, host_name: str, strategy: MaintenanceStrategy | None, dry_run: bool, by: str
    ) -> dict[str, Any]:
        ctx = self.ctx
        host = self._host(host_name)
        state = host.status.resource_state
        if state is HostResourceState.DISABLED:
            raise MaintenanceRefused(
                409,
                "HostDisabled",
                f"host {host_name} is Disabled: maintenance starts from Enabled; "
                "enable it first (PATCH spec.enabled=true)",
            )
        current = ctx.store.find(HostMaintenance, host_name)
        active = current is not None and current.status.phase in ACTIVE_PHASES
        if active and current is not None and current.status.phase is MaintenancePhase.CANCELLING:
            raise MaintenanceRefused(
                409,
                "MaintenanceCancelling",
                f"the maintenance of {host_name} is being cancelled; ask again after",
            )
        effective = _strategy(ctx, strategy)
        if dry_run:
            plan = compute_plan(ctx, host_name, effective)
            preview = HostMaintenance(
                metadata=Metadata(name=host_name),
                spec=HostMaintenanceSpec(host=host_name, strategy=strategy, dry_run=True),
                status=HostMaintenanceStatus(
                    phase=MaintenancePhase.PLANNED, strategy=effective, plan=_items(plan)
                ),
            )
            preview.status.blocking = [i.vm for i in plan.blocked]
            preview.status.message = "dry run: nothing was changed" + (
                "" if plan.feasible else f"; blocked: {', '.join(preview.status.blocking)}"
            )
            return view(preview, host)
        retry = state is HostResourceState.ERROR_IN_MAINTENANCE or (
            current is not None and current.status.phase is MaintenancePhase.FAILED
        )
        if active and current is not None and not retry:
            if strategy is not None and strategy != (current.spec.strategy or current.status.strategy):
                raise MaintenanceRefused(
                    409,
                    "MaintenanceInProgress",
                    f"host {host_name} is in {state.value} with strategy "
                    f"{(current.status.strategy or effective).value}; cancel it to change the strategy",
                )
            return view(current, host)  # asking again while it runs is a no-op
        plan = compute_plan(ctx, host_name, effective)
        if current is None:
            created = ctx.store.create(
                HostMaintenance(
                    metadata=Metadata(name=host_name),
                    spec=HostMaintenanceSpec(host=host_name, strategy=strategy),
                    status=HostMaintenanceStatus(
                        phase=MaintenancePhase.DRAINING,
                        strategy=effective,
                        plan=_items(plan),
                        started_at=ctx.now(),
                    ),
                )
            )
            ctx.cache.put(created)
            ctx.event(("Host", host_name), "MaintenanceRequested", f"by {by}, strategy {effective.value}")
            return view(created, host)

        def ask(m: HostMaintenance) -> None:
            m.spec.strategy = strategy
            m.spec.cancel = False
            m.spec.dry_run = False
            m.spec.request += 1
            if retry and m.status.phase is MaintenancePhase.FAILED:
                m.status.plan = _items(plan)
                m.status.strategy = effective
                m.status.message = "retry requested"
            else:  # a new maintenance after a cancelled one
                m.status = HostMaintenanceStatus(
                    phase=MaintenancePhase.DRAINING,
                    strategy=effective,
                    plan=_items(plan),
                    started_at=ctx.now(),
                    observed_generation=m.status.observed_generation,
                )

        written = ctx.store.mutate(HostMaintenance, host_name, ask)
        ctx.cache.put(written)
        what = "retry" if retry else "request"
        ctx.event(("Host", host_name), "MaintenanceRequested", f"{what} by {by}, strategy {effective.value}")
        return view(written, host)

    def show(self, host_name: str) -> dict[str, Any]:
        host = self._host(host_name)
        current = self.ctx.store.find(HostMaintenance, host_name)
        if current is None:
            raise MaintenanceRefused(404, "NotInMaintenance", f"host {host_name} is not in maintenance")
        return view(current, host)

    def cancel(self, host_name: str, by: str) -> dict[str, Any]:
        host = self._host(host_name)
        current = self.ctx.store.find(HostMaintenance, host_name)
        if current is None or current.status.phase is MaintenancePhase.CANCELLED:
            raise MaintenanceRefused(404, "NotInMaintenance", f"host {host_name} is not in maintenance")
        if current.spec.cancel:
            return view(current, host)

        def cancel(m: HostMaintenance) -> None:
            m.spec.cancel = True

        written = self.ctx.store.mutate(HostMaintenance, host_name, cancel)
        self.ctx.cache.put(written)
        self.ctx.event(("Host", host_name), "MaintenanceCancelRequested", f"by {by}")
        return view(written, host)


# --------------------------------------------------------------------------- the controller


@dataclass
class _Drain:
    """What one look at the host found."""

    running: list[str]
    in_flight: list[str]
    inbound: list[str]
    failed: list[str]
    retrying: bool


class MaintenanceReconciler:
    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.coordinator = coordinator

    # ------------------------------------------------------------------ helpers

    def _transition(self, host_name: str, event: HostEvent, message: str) -> HostResourceState:
        """Move the host through the state table; an event the state does not take is skipped."""
        ctx = self.ctx
        host = ctx.store.get(Host, host_name)
        before = host.status.resource_state
        try:
            after = next_state(before, event)
        except InvalidTransition as exc:
            log.info("host %s: %s", host_name, exc)
            return before

        def change(current: Host) -> None:
            current.status.resource_state = next_state(current.status.resource_state, event)
            current.status.conditions = set_condition(
                current.status.conditions,
                HOST_CONDITION,
                in_maintenance(current.status.resource_state),
                current.status.resource_state.value,
                message,
                now=ctx.now(),
            )

        written = ctx.mutate(Host, host_name, change)
        if after != before:
            ctx.event(
                written,
                after.value,
                f"{before.value} -> {after.value}: {message}",
                warning=after
                in (
                    HostResourceState.ERROR_IN_MAINTENANCE,
                    HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE,
                ),
            )
        return written.status.resource_state

    def _save(self, m: HostMaintenance) -> HostMaintenance:
        written = self.ctx.write(m)
        assert isinstance(written, HostMaintenance)
        return written

    # ------------------------------------------------------------------ reconcile

    async def __call__(self, req: Request) -> Result | None:
        m = self.ctx.store.find(HostMaintenance, req.name)
        if m is None or m.spec.dry_run or m.status.phase is MaintenancePhase.CANCELLED:
            return None
        host = self.ctx.store.find(Host, m.spec.host)
        if host is None:
            if m.status.phase is not MaintenancePhase.FAILED:
                m.status.phase = MaintenancePhase.FAILED
                m.status.message = f"host {m.spec.host} does not exist"
                self._save(m)
            return None
        if m.spec.cancel:
            return await self._cancel(m, host)
        if m.status.observed_generation != m.metadata.generation:
            return self._start(m, host)
        if m.status.phase is MaintenancePhase.DRAINING:
            return await self._drain(m, host)
        return None

    def _start(self, m: HostMaintenance, host: Host) -> Result | None:
        """A new or repeated request: AskMaintenance, plan again, stop here if the plan is blocked."""
        ctx = self.ctx
        name = host.metadata.name
        m.status.observed_generation = m.metadata.generation
        try:
            next_state(host.status.resource_state, HostEvent.ASK_MAINTENANCE)
        except InvalidTransition as exc:
            m.status.phase = MaintenancePhase.FAILED
            m.status.message = str(exc)
            self._save(m)
            ctx.event(host, "MaintenanceRefused", str(exc), warning=True)
            return None
        strategy = _strategy(ctx, m.spec.strategy)
        plan = compute_plan(ctx, name, strategy)
        m.status.phase = MaintenancePhase.DRAINING
        m.status.strategy = strategy
        m.status.plan = _items(plan)
        m.status.blocking = []
        m.status.finished_at = None
        m.status.started_at = m.status.started_at or ctx.now()
        # a retry starts the VMs that failed or were blocked afresh
        m.status.progress = {
            vm: p for vm, p in m.status.progress.items() if p.state not in ("Failed", "Blocked", "Retrying")
        }
        m.status.message = f"plan: {len(plan.items)} VM(s), strategy {strategy.value}"
        m = self._save(m)
        self._transition(name, HostEvent.ASK_MAINTENANCE, f"maintenance asked, strategy {strategy.value}")
        ctx.event(
            host,
            "MaintenancePlanned",
            "; ".join(f"{i.vm}: {i.action.value} {i.target or ''}".rstrip() for i in plan.items) or "no VMs",
        )
        if not plan.feasible:
            self._blocked(m, name, {i.vm: i.reason for i in plan.blocked}, touched=False)
            return None
        return Result(requeue_after=0.0)

    def _blocked(self, m: HostMaintenance, host: str, why: dict[str, str], *, touched: bool) -> None:
        ctx = self.ctx
        for vm, reason in why.items():
            progress = m.status.progress.get(vm) or MaintenanceVMProgress()
            if progress.state != "Failed":
                progress.state = "Blocked"
            progress.message = progress.message or reason
            m.status.progress[vm] = progress
        m.status.blocking = sorted(why)
        m.status.phase = MaintenancePhase.FAILED
        m.status.finished_at = ctx.now()
        details = "; ".join(f"{vm}: {reason}" for vm, reason in sorted(why.items()))
        m.status.message = ("nothing was touched; " if not touched else "") + f"blocked by {details}"
        self._save(m)
        state = ctx.store.get(Host, host).status.resource_state
        if state is not HostResourceState.MAINTENANCE:
            self._transition(host, HostEvent.BLOCKED, f"VMs block the drain: {details}")
        for vm in why:
            ctx.event(
                ("VirtualMachine", vm),
                "MaintenanceBlocked",
                f"blocks the maintenance of {host}: {why[vm]}",
                warning=True,
            )
        return None

    # ------------------------------------------------------------------ draining

    def _observe(self, m: HostMaintenance, vm: VirtualMachine) -> MaintenanceVMProgress:
        """Bring the VM's progress up to date with the VM itself (intent, host, condition)."""
        name = vm.metadata.name
        host = m.spec.host
        progress = m.status.progress.get(name) or MaintenanceVMProgress()
        intent = read_migration(vm.metadata.annotations)
        if intent is not None and intent.requested_by == maintenance_tag(host):
            progress.state = "Returning" if intent.target == host else "Migrating"
            progress.target = intent.target
            progress.attempts = max(progress.attempts, intent.attempt)
            if intent.target not in progress.tried and intent.target != host:
                progress.tried.append(intent.target)
            progress.progress_pct = self.coordinator.progress_pct(name)
            progress.message = ""
        elif progress.state == "Migrating" and progress.target:
            if vm.status.host == progress.target:
                progress.state, progress.progress_pct, progress.message = "Migrated", 100.0, ""
                m.status.migrated_vms[name] = progress.target
                self.ctx.event(("Host", host), "VMMigrated", f"{name} moved to {progress.target}")
            else:
                error = failure_message(vm)
                max_attempts = self.ctx.settings.get_int("migration.max_attempts")
                progress.progress_pct = 0.0
                if progress.attempts >= max_attempts:
                    progress.state = "Failed"
                    progress.message = f"{error}; {progress.attempts} attempt(s) used, the VM keeps running on {vm.status.host}"
                else:
                    progress.state = "Retrying"
                    progress.message = f"{error}; retrying on another host"
                self.ctx.event(
                    ("Host", host), "VMMigrationFailed", f"{name}: {progress.message}", warning=True
                )
        m.status.progress[name] = progress
        return progress

    def _departed(self, m: HostMaintenance) -> list[VirtualMachine]:
        """VMs whose migration off the host was under way and that are no longer on it."""
        result = []
        for vm_name, progress in m.status.progress.items():
            vm = self.ctx.cache.vm(vm_name)
            if vm is not None and progress.state == "Migrating" and vm.status.host != m.spec.host:
                result.append(vm)
        return result

    def _plan_item(self, m: HostMaintenance, vm: VirtualMachine) -> PlanItem:
        stored = next((i for i in m.status.plan if i.vm == vm.metadata.name), None)
        if stored is not None and not (
            stored.action == PlanAction.LEAVE.value and vm.status.phase in RUNNING_PHASES
        ):
            return PlanItem(stored.vm, PlanAction(stored.action), stored.target, stored.reason)
        # a VM that came (or started) after the plan was made gets a plan of its own
        item = compute_plan(
            self.ctx, m.spec.host, m.status.strategy or MaintenanceStrategy.ERROR, [vm]
        ).items[0]
        m.status.plan = [i for i in m.status.plan if i.vm != item.vm] + [
            MaintenancePlanItem(vm=item.vm, action=item.action.value, target=item.target, reason=item.reason)
        ]
        return item

    async def _drain(self, m: HostMaintenance, host: Host) -> Result | None:
        ctx = self.ctx
        name = host.metadata.name
        tag = maintenance_tag(name)
        found = _Drain(running=[], in_flight=[], inbound=[], failed=[], retrying=False)
        for vm, intent in in_flight(ctx.cache.vms()):
            if intent.target == name:
                found.inbound.append(vm.metadata.name)
        for vm in self._departed(m):
            self._observe(m, vm)
        for vm in sorted(ctx.cache.vms_on_host(name), key=lambda v: v.metadata.name):
            vm_name = vm.metadata.name
            progress = self._observe(m, vm)
            intents = read_intents(vm.metadata.annotations)
            if read_migration(vm.metadata.annotations) is not None:
                found.in_flight.append(vm_name)
                found.running.append(vm_name)
                continue
            if vm.status.phase not in RUNNING_PHASES:
                if intents.held_by == tag:
                    progress.state, progress.message = (
                        "Stopped",
                        "stopped by maintenance; starts again on cancel",
                    )
                    if vm_name not in m.status.stopped_vms:
                        m.status.stopped_vms.append(vm_name)
                elif progress.state == "Pending":
                    progress.state, progress.message = "Left", "not running"
                continue
            found.running.append(vm_name)
            if progress.state in ("Failed", "Blocked"):
                found.failed.append(vm_name)
                continue
            item = self._plan_item(m, vm)
            if item.action in (PlanAction.STOP, PlanAction.FORCE_STOP):
                self._stop(m, vm, item.action, progress)
            elif item.action in (PlanAction.MIGRATE, PlanAction.MIGRATE_WITH_STORAGE):
                await self._migrate(m, vm, item, progress)
                if progress.state == "Failed":
                    found.failed.append(vm_name)
            elif item.action is PlanAction.BLOCKED:
                progress.state, progress.message = "Blocked", item.reason
                found.failed.append(vm_name)
        found.retrying = any(
            p.state == "Retrying" or (p.attempts > 1 and p.state in _UNFINISHED)
            for vm, p in m.status.progress.items()
            if vm in found.running
        )
        state = ctx.store.get(Host, name).status.resource_state
        if not found.running and not found.inbound:
            m.status.phase = MaintenancePhase.COMPLETED
            m.status.finished_at = ctx.now()
            m.status.blocking = []
            m.status.message = (
                f"drained: {len(m.status.migrated_vms)} migrated, {len(m.status.stopped_vms)} stopped"
            )
            self._save(m)
            if state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE:
                self._transition(name, HostEvent.ERRORS_CORRECTED, "the failed migrations were retried")
            self._transition(name, HostEvent.DRAINED, m.status.message)
            return None
        movable = [vm for vm in found.running if vm not in found.failed]
        if found.failed and not movable and not found.in_flight:
            why = {vm: m.status.progress[vm].message for vm in found.failed}
            self._blocked(m, name, why, touched=True)
            return None
        if found.retrying and state is HostResourceState.PREPARE_FOR_MAINTENANCE:
            self._transition(
                name, HostEvent.MIGRATION_FAILED_RETRYABLE, "a migration failed; retrying elsewhere"
            )
        elif (
            not found.retrying
            and not found.failed
            and state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE
        ):
            self._transition(name, HostEvent.ERRORS_CORRECTED, "the failed migrations were retried")
        waiting = len(found.running) + len(found.inbound)
        m.status.message = f"draining: {waiting} VM(s) left" + (
            f", {len(found.inbound)} arriving" if found.inbound else ""
        )
        self._save(m)
        return Result(requeue_after=POLL_S)

    def _stop(
        self, m: HostMaintenance, vm: VirtualMachine, action: PlanAction, progress: MaintenanceVMProgress
    ) -> None:
        """Record the VM's power intent on the VM, then let the VM controller stop it."""
        ctx = self.ctx
        tag = maintenance_tag(m.spec.host)
        mode = StopMode.FORCE if action is PlanAction.FORCE_STOP else StopMode.GRACEFUL
        if read_intents(vm.metadata.annotations).held_by != tag:

            def hold(current: VirtualMachine) -> None:
                intents = read_intents(current.metadata.annotations)
                current.metadata.annotations = write_intents(
                    current.metadata.annotations,
                    intents.with_(
                        maintenance_power_state=PowerState.RUNNING,
                        stop=mode,
                        stop_by_system=True,
                        held_by=tag,
                        start=False,
                    ),
                )

            written = ctx.mutate(VirtualMachine, vm.metadata.name, hold)
            ctx.event(
                written,
                "MaintenanceStop",
                f"{mode.value} stop for the maintenance of {m.spec.host}; it starts again when the maintenance ends",
            )
            ctx.event(("Host", m.spec.host), "VMStopping", f"{vm.metadata.name}: {mode.value} stop")
        if vm.metadata.name not in m.status.stopped_vms:
            m.status.stopped_vms.append(vm.metadata.name)
        progress.state = "Stopping"
        progress.message = f"{mode.value} stop" + (
            f", forced after {vm.spec.termination_grace_period_s}s" if mode is StopMode.GRACEFUL else ""
        )

    async def _migrate(
        self, m: HostMaintenance, vm: VirtualMachine, item: PlanItem, progress: MaintenanceVMProgress
    ) -> None:
        ctx = self.ctx
        max_attempts = ctx.settings.get_int("migration.max_attempts")
        if vm.status.phase not in MIGRATABLE_PHASES:
            progress.state, progress.message = (
                "Pending",
                f"the VM is {vm.status.phase.value}; it moves once running",
            )
            return
        first = progress.attempts == 0 and bool(item.target) and item.target not in progress.tried
        waiting = self.coordinator.waiting_for_slot(vm.status.host, item.target) if first and item.target else ""
        if waiting:  # the planned target's slot is taken: no need to look further now
            progress.state, progress.message = "WaitingForSlot", waiting
            return
        choice = self.coordinator.choose_target(vm, exclude=frozenset(progress.tried))
        target = choice.host
        if first and item.target:
            planned = self.coordinator.choose_target(vm, only=item.target)
            target = planned.host or target
        if target is None:
            detail = (
                "; ".join(f"{h}: {r}" for h, r in sorted(choice.reasons.items()))
                or "there are no other hosts"
            )
            progress.state = "Failed"
            progress.message = f"no target host: {detail}" + (
                f" (after {progress.attempts} failed attempt(s))" if progress.attempts else ""
            )
            return
        result = await self.coordinator.begin(
            vm.metadata.name, target, requested_by=maintenance_tag(m.spec.host), attempt=progress.attempts + 1
        )
        if isinstance(result, Waiting):
            progress.state, progress.message = "WaitingForSlot", result.message
            return
        progress.attempts += 1
        progress.tried.append(target)
        progress.target = target
        if isinstance(result, Refused):
            failed = progress.attempts >= max_attempts
            progress.state = "Failed" if failed else "Retrying"
            progress.message = result.message
            ctx.event(
                ("Host", m.spec.host),
                "VMMigrationFailed",
                f"{vm.metadata.name}: {result.message}",
                warning=True,
            )
            return
        assert isinstance(result, Started)
        progress.state, progress.message, progress.progress_pct = "Migrating", "", 0.0
        ctx.event(
            ("Host", m.spec.host),
            "VMMigrating",
            f"{vm.metadata.name} to {target} (attempt {progress.attempts})",
        )

    # ------------------------------------------------------------------ cancel

    async def _cancel(self, m: HostMaintenance, host: Host) -> Result | None:
        ctx = self.ctx
        name = host.metadata.name
        tag = maintenance_tag(name)
        if m.status.phase is not MaintenancePhase.CANCELLING:
            m.status.phase = MaintenancePhase.CANCELLING
            m.status.message = "cancelling: no new moves; waiting for migrations in flight"
            m = self._save(m)
            ctx.event(host, "MaintenanceCancelling", "no new moves are scheduled")
        ours = [vm for vm, intent in in_flight(ctx.cache.vms()) if intent.requested_by == tag]
        for vm in ctx.cache.vms_on_host(name) + ours + self._departed(m):
            if vm.metadata.name in m.status.progress or read_migration(vm.metadata.annotations):
                self._observe(m, vm)
        state = ctx.store.get(Host, name).status.resource_state
        if in_maintenance(state):
            if ours:
                m.status.message = f"cancelling: waiting for {len(ours)} migration(s) in flight"
                self._save(m)
                return Result(requeue_after=POLL_S)
            self._transition(name, HostEvent.CANCEL, "maintenance cancelled")
        self._release(name)
        if ctx.settings.get_bool("host.maintenance.return_vms") and not await self._return_vms(m, host):
            self._save(m)
            return Result(requeue_after=POLL_S)
        m.status.phase = MaintenancePhase.CANCELLED
        m.status.finished_at = ctx.now()
        m.status.message = "cancelled: the host is back in service"
        self._save(m)
        ctx.event(host, "MaintenanceCancelled", m.status.message)
        return None

    def _release(self, host: str) -> None:
        """Let go of the VMs maintenance stopped: their recorded power state starts them again."""
        ctx = self.ctx
        tag = maintenance_tag(host)
        for vm in ctx.cache.vms():
            if read_intents(vm.metadata.annotations).held_by != tag:
                continue

            def release(current: VirtualMachine) -> None:
                intents = read_intents(current.metadata.annotations)
                if intents.held_by != tag:
                    return
                if intents.stop_by_system:
                    intents = intents.with_(
                        stop=None, stop_by_system=False
                    )  # a stop not done yet is called off
                current.metadata.annotations = write_intents(
                    current.metadata.annotations, intents.with_(held_by=None)
                )

            written = ctx.mutate(VirtualMachine, vm.metadata.name, release)
            ctx.event(written, "MaintenanceReleased", f"the maintenance of {host} ended; the VM starts again")

    async def _return_vms(self, m: HostMaintenance, host: Host) -> bool:
        """Migrate back the VMs that left, where there is room; True once nothing is left to do."""
        name = host.metadata.name
        done = True
        for vm_name, went_to in sorted(m.status.migrated_vms.items()):
            progress = m.status.progress.get(vm_name) or MaintenanceVMProgress()
            if progress.state in ("Returned", "NotReturned"):
                continue
            vm = self.ctx.cache.vm(vm_name)
            if vm is None:
                progress.state, progress.message = "NotReturned", "the VM is gone"
            elif read_migration(vm.metadata.annotations) is not None:
                done = False
            elif vm.status.host == name:
                progress.state, progress.message = "Returned", f"back on {name}"
            elif progress.state == "Returning":
                progress.state, progress.message = "NotReturned", failure_message(vm)
            elif vm.status.host != went_to or vm.status.phase not in MIGRATABLE_PHASES:
                progress.state = "NotReturned"
                progress.message = f"the VM is {vm.status.phase.value} on {vm.status.host}; left where it is"
            else:
                choice = self.coordinator.choose_target(vm, only=name)
                if choice.host is None:
                    progress.state = "NotReturned"
                    progress.message = f"no room to return: {choice.reasons.get(name, 'unknown')}"
                else:
                    result = await self.coordinator.begin(
                        vm_name, name, requested_by=maintenance_tag(name), attempt=1
                    )
                    if isinstance(result, Started):
                        progress.state, progress.target, progress.message = "Returning", name, ""
                        done = False
                    elif isinstance(result, Waiting):
                        progress.state, progress.message = "WaitingForSlot", result.message
                        done = False
                    else:
                        progress.state, progress.message = "NotReturned", result.message
            m.status.progress[vm_name] = progress
        return done


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
