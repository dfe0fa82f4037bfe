"""Draining a host: a new or repeated request plans again and stores the plan before anything
moves; then each running VM is live-migrated through the coordinator or stopped, until the
host is empty (Maintenance) or what is left cannot move (ErrorInMaintenance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from virtplane.controllers.maintenance.plan import compute_plan, strategy_of
from virtplane.controllers.maintenance.tracking import POLL_S, Tracker, progress_of, record
from virtplane.controllers.migration import Refused, Started, Waiting, in_flight, maintenance_tag
from virtplane.domain.host_states import HostEvent, InvalidTransition, next_state
from virtplane.domain.intents import PowerState, StopMode, read_intents, read_migration, write_intents
from virtplane.domain.maintenance_plan import PlanItem, restart_status
from virtplane.domain.phases import LIVE_PHASES, MIGRATABLE_PHASES
from virtplane.domain.placement import why_no_target
from virtplane.domain.progress import (
    STUCK,
    Began,
    Blocked,
    Left,
    MoveProgress,
    NoSlot,
    NoTarget,
    NotReady,
    PlanAction,
    ProgressState,
    StopAsked,
    StoppedHere,
    TargetRefused,
    advance,
    retrying,
)
from virtplane.domain.resources import (
    Host,
    HostMaintenance,
    HostResourceState,
    MaintenancePhase,
    MaintenancePlanItem,
    MaintenanceStrategy,
    VirtualMachine,
)
from virtplane.reconcile.types import Result


@dataclass
class _Drain:
    """What one look at the host found."""

    running: list[str]
    in_flight: list[str]
    inbound: list[str]
    failed: list[str]
    retrying: bool


class Drain(Tracker):
    async def start(self, m: HostMaintenance, host: Host) -> Result | None:
        """A new or repeated request: AskMaintenance, plan again, stop here if the plan is blocked."""
        ctx = self.ctx
        name = host.metadata.name
        strategy = strategy_of(ctx, m.spec.strategy)
        plan = compute_plan(ctx, name, strategy)
        m.status = restart_status(m.status, plan, ctx.now())
        m.status.observed_generation = m.metadata.generation
        try:
            next_state(host.status.resource_state, HostEvent.ASK_MAINTENANCE)
        except InvalidTransition as exc:
            m.status.phase = MaintenancePhase.FAILED
            m.status.message = str(exc)
            ctx.event(host, "MaintenanceRefused", str(exc), warning=True)
            await self.save(m)
            return None
        ctx.event(
            host,
            "MaintenancePlanned",
            "; ".join(f"{i.vm}: {i.action.value} {i.target or ''}".rstrip() for i in plan.items) or "no VMs",
        )
        asked = (HostEvent.ASK_MAINTENANCE, f"maintenance asked, strategy {strategy.value}")
        m = await self.save_moving(m, [asked])
        if not plan.feasible:
            await self._blocked(m, name, {i.vm: i.reason for i in plan.blocked}, touched=False)
            return None
        return Result(requeue_after=0.0)

    async def _blocked(self, m: HostMaintenance, host: str, why: dict[str, str], *, touched: bool) -> None:
        ctx = self.ctx
        for vm, reason in why.items():
            record(m, vm, advance(progress_of(m, vm), Blocked(reason)))
        m.status.blocking = sorted(why)
        m.status.phase = MaintenancePhase.FAILED
        m.status.finished_at = ctx.now()
        details = "; ".join(f"{vm}: {reason}" for vm, reason in sorted(why.items()))
        m.status.message = ("nothing was touched; " if not touched else "") + f"blocked by {details}"
        for vm in why:
            ctx.event(
                ("VirtualMachine", vm),
                "MaintenanceBlocked",
                f"blocks the maintenance of {host}: {why[vm]}",
                warning=True,
            )
        state = ctx.store.get(Host, host).status.resource_state
        moves = (
            []
            if state is HostResourceState.MAINTENANCE
            else [(HostEvent.BLOCKED, f"VMs block the drain: {details}")]
        )
        await self.save_moving(m, moves)
        return None

    def _plan_item(self, m: HostMaintenance, vm: VirtualMachine) -> PlanItem:
        stored = next((i for i in m.status.plan if i.vm == vm.metadata.name), None)
        if stored is not None and not (stored.action is PlanAction.LEAVE and vm.status.phase in LIVE_PHASES):
            return PlanItem(stored.vm, stored.action, stored.target, stored.reason)
        # a VM that came (or started) after the plan was made gets a plan of its own
        item = compute_plan(
            self.ctx, m.spec.host, m.status.strategy or MaintenanceStrategy.ERROR, [vm]
        ).items[0]
        m.status.plan = [i for i in m.status.plan if i.vm != item.vm] + [
            MaintenancePlanItem(vm=item.vm, action=item.action, target=item.target, reason=item.reason)
        ]
        return item

    async def step(self, m: HostMaintenance, host: Host) -> Result | None:
        ctx = self.ctx
        name = host.metadata.name
        tag = maintenance_tag(name)
        found = _Drain(running=[], in_flight=[], inbound=[], failed=[], retrying=False)
        for vm, intent in in_flight(ctx.cache):
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
            if vm.status.phase not in LIVE_PHASES:
                if intents.held_by == tag:
                    self._advance(m, vm_name, StoppedHere())
                    if vm_name not in m.status.stopped_vms:
                        m.status.stopped_vms.append(vm_name)
                else:
                    self._advance(m, vm_name, Left())
                continue
            found.running.append(vm_name)
            if progress.state in STUCK:
                found.failed.append(vm_name)
                continue
            item = self._plan_item(m, vm)
            match item.action:
                case PlanAction.STOP | PlanAction.FORCE_STOP:
                    self._stop(m, vm, item.action)
                case PlanAction.MIGRATE | PlanAction.MIGRATE_WITH_STORAGE:
                    if (await self._migrate(m, vm, item, progress)).state is ProgressState.FAILED:
                        found.failed.append(vm_name)
                case PlanAction.BLOCKED:
                    self._advance(m, vm_name, Blocked(item.reason))
                    found.failed.append(vm_name)
                case PlanAction.LEAVE:
                    # never for a live VM: _plan_item plans one planned LEAVE again, and the
                    # planner leaves only VMs that are not live; the next look sees it anew
                    pass
                case _:
                    assert_never(item.action)
        found.retrying = any(retrying(progress_of(m, vm)) for vm in found.running)
        state = ctx.store.get(Host, name).status.resource_state
        if not found.running and not found.inbound:
            m.status.phase = MaintenancePhase.COMPLETED
            m.status.finished_at = ctx.now()
            m.status.blocking = []
            m.status.message = (
                f"drained: {len(m.status.migrated_vms)} migrated, {len(m.status.stopped_vms)} stopped"
            )
            moves = [(HostEvent.DRAINED, m.status.message)]
            if state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE:
                moves.insert(0, (HostEvent.ERRORS_CORRECTED, "the failed migrations were retried"))
            await self.save_moving(m, moves)
            return None
        movable = [vm for vm in found.running if vm not in found.failed]
        if found.failed and not movable and not found.in_flight:
            why = {vm: m.status.progress[vm].message for vm in found.failed}
            await self._blocked(m, name, why, touched=True)
            return None
        moves = []
        if found.retrying and state is HostResourceState.PREPARE_FOR_MAINTENANCE:
            moves.append((HostEvent.MIGRATION_FAILED_RETRYABLE, "a migration failed; retrying elsewhere"))
        elif (
            not found.retrying
            and not found.failed
            and state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE
        ):
            moves.append((HostEvent.ERRORS_CORRECTED, "the failed migrations were retried"))
        waiting = len(found.running) + len(found.inbound)
        m.status.message = f"draining: {waiting} VM(s) left" + (
            f", {len(found.inbound)} arriving" if found.inbound else ""
        )
        await self.save_moving(m, moves)
        return Result(requeue_after=POLL_S)

    def _stop(self, m: HostMaintenance, vm: VirtualMachine, action: PlanAction) -> None:
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

            ctx.event(
                vm,
                "MaintenanceStop",
                f"{mode.value} stop for the maintenance of {m.spec.host}; it starts again when the maintenance ends",
            )
            ctx.event(("Host", m.spec.host), "VMStopping", f"{vm.metadata.name}: {mode.value} stop")
            ctx.mutate(VirtualMachine, vm.metadata.name, hold)  # with the events above
        if vm.metadata.name not in m.status.stopped_vms:
            m.status.stopped_vms.append(vm.metadata.name)
        forced = f", forced after {vm.spec.termination_grace_period_s}s" if mode is StopMode.GRACEFUL else ""
        self._advance(m, vm.metadata.name, StopAsked(f"{mode.value} stop{forced}"))

    async def _migrate(
        self, m: HostMaintenance, vm: VirtualMachine, item: PlanItem, progress: MoveProgress
    ) -> MoveProgress:
        ctx = self.ctx
        name = vm.metadata.name
        if vm.status.phase not in MIGRATABLE_PHASES:
            return self._advance(
                m, name, NotReady(f"the VM is {vm.status.phase.value}; it moves once running")
            )
        first = progress.attempts == 0 and bool(item.target) and item.target not in progress.tried
        waiting = (
            self.coordinator.waiting_for_slot(vm.status.host, item.target) if first and item.target else ""
        )
        if waiting:  # the planned target's slot is taken: no need to look further now
            return self._advance(m, name, NoSlot(waiting))
        choice = self.coordinator.choose_target(vm, exclude=frozenset(progress.tried))
        target = choice.host
        if first and item.target:
            planned = self.coordinator.choose_target(vm, only=item.target)
            target = planned.host or target
        if target is None:
            return self._advance(m, name, NoTarget(why_no_target(choice)))
        result = await self.coordinator.begin(
            name, target, requested_by=maintenance_tag(m.spec.host), attempt=progress.attempts + 1
        )
        if isinstance(result, Waiting):
            return self._advance(m, name, NoSlot(result.message))
        if isinstance(result, Refused):
            ctx.event(("Host", m.spec.host), "VMMigrationFailed", f"{name}: {result.message}", warning=True)
            return self._advance(m, name, TargetRefused(target, result.message))
        assert isinstance(result, Started)
        progress = self._advance(m, name, Began(target))
        ctx.event(("Host", m.spec.host), "VMMigrating", f"{name} to {target} (attempt {progress.attempts})")
        return progress
