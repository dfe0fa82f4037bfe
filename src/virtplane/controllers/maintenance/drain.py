"""Draining a host: a new or repeated request plans again and stores the plan before anything
moves; then each running VM is live-migrated through the coordinator or stopped, until the
host is empty (Maintenance) or what is left cannot move (ErrorInMaintenance)."""

from __future__ import annotations

from typing import assert_never

from virtplane.controllers.chain import Step, StopChain
from virtplane.controllers.context import Change
from virtplane.controllers.maintenance.plan import compute_plan, strategy_of
from virtplane.controllers.maintenance.tracking import POLL_S, MaintenanceRun, Tracker, progress_of, record
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
    HostMaintenance,
    HostResourceState,
    MaintenancePhase,
    MaintenancePlanItem,
    MaintenanceStrategy,
    VirtualMachine,
)
from virtplane.reconcile.types import Result


class Drain(Tracker):
    def chain(self) -> tuple[Step[MaintenanceRun], ...]:
        """The drain's steps, in order; each does its part or nothing (a cancel skips them all)."""
        return (
            Step("plan", self.plan),  # a new or repeated request: the plan stored before anything moves
            Step("survey", self.survey),  # each VM's progress from the VM itself
            Step("move", self.move),  # migrate or stop each live VM, as planned
            Step("conclude", self.conclude),  # Maintenance, ErrorInMaintenance, or look again
        )

    async def plan(self, run: MaintenanceRun) -> Result | None:
        """AskMaintenance, plan again, stop here if the plan is blocked. Durable point: the plan
        and the host's move, before any VM moves (the next look drains)."""
        if not run.asked:
            return None
        ctx, m, host = self.ctx, run.m, run.host
        strategy = strategy_of(ctx, m.spec.strategy)
        plan = compute_plan(ctx, run.name, strategy)
        m.status = restart_status(m.status, plan, ctx.now())
        m.status.observed_generation = m.metadata.generation
        try:
            next_state(host.status.resource_state, HostEvent.ASK_MAINTENANCE)
        except InvalidTransition as exc:
            m.status.phase = MaintenancePhase.FAILED
            m.status.message = str(exc)
            ctx.event(host, "MaintenanceRefused", str(exc), warning=True)
            await self.save(m)
            raise StopChain(None) from exc
        ctx.event(
            host,
            "MaintenancePlanned",
            "; ".join(f"{i.vm}: {i.action.value} {i.target or ''}".rstrip() for i in plan.items) or "no VMs",
        )
        asked = (HostEvent.ASK_MAINTENANCE, f"maintenance asked, strategy {strategy.value}")
        run.m = await self.save_moving(m, [asked], durable="maintenance.planned")
        if not plan.feasible:
            await self._blocked(run, {i.vm: i.reason for i in plan.blocked}, touched=False)
            raise StopChain(None)
        raise StopChain(Result(requeue_after=0.0))

    async def _blocked(self, run: MaintenanceRun, why: dict[str, str], *, touched: bool) -> None:
        ctx, m = self.ctx, run.m
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
                f"blocks the maintenance of {run.name}: {why[vm]}",
                warning=True,
            )
        moves = (
            []
            if self._host_state(run) is HostResourceState.MAINTENANCE
            else [(HostEvent.BLOCKED, f"VMs block the drain: {details}")]
        )
        run.m = await self.save_moving(m, moves)

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

    async def survey(self, run: MaintenanceRun) -> Result | None:
        """Bring each VM's progress up to date; note what is in flight, arriving, stuck or
        stopped here, and which live VMs the next step acts on."""
        if run.m.status.phase is not MaintenancePhase.DRAINING:
            raise StopChain(None)
        ctx, m, name = self.ctx, run.m, run.name
        tag = maintenance_tag(name)
        run.inbound = [vm.metadata.name for vm, intent in in_flight(ctx.cache) if intent.target == name]
        for vm in self._departed(m):
            self._observe(m, vm)
        for vm in sorted(ctx.cache.vms_on_host(name), key=lambda v: v.metadata.name):
            vm_name = vm.metadata.name
            progress = self._observe(m, vm)
            if read_migration(vm.metadata.annotations) is not None:
                run.in_flight.append(vm_name)
                run.running.append(vm_name)
            elif vm.status.phase not in LIVE_PHASES:
                if read_intents(vm.metadata.annotations).held_by == tag:
                    self._advance(m, vm_name, StoppedHere())
                    if vm_name not in m.status.stopped_vms:
                        m.status.stopped_vms.append(vm_name)
                else:
                    self._advance(m, vm_name, Left())
            else:
                run.running.append(vm_name)
                if progress.state in STUCK:
                    run.failed.append(vm_name)
                else:
                    run.to_move.append((vm, progress))
        return None

    async def move(self, run: MaintenanceRun) -> Result | None:
        """Each live VM as its plan item says: stopped (its power intent held first), migrated
        through the coordinator, or blocked."""
        m = run.m
        for vm, progress in run.to_move:
            item = self._plan_item(m, vm)
            match item.action:
                case PlanAction.STOP | PlanAction.FORCE_STOP:
                    await self._stop(m, vm, item.action)
                case PlanAction.MIGRATE | PlanAction.MIGRATE_WITH_STORAGE:
                    if (await self._migrate(m, vm, item, progress)).state is ProgressState.FAILED:
                        run.failed.append(vm.metadata.name)
                case PlanAction.BLOCKED:
                    self._advance(m, vm.metadata.name, Blocked(item.reason))
                    run.failed.append(vm.metadata.name)
                case PlanAction.LEAVE:
                    # never for a live VM: _plan_item plans one planned LEAVE again, and the
                    # planner leaves only VMs that are not live; the next look sees it anew
                    pass
                case _:
                    assert_never(item.action)
        return None

    async def conclude(self, run: MaintenanceRun) -> Result | None:
        """Empty and nothing arriving: Maintenance. Only stuck VMs left: ErrorInMaintenance with
        them still running. Else the host's state follows the retries, and the drain looks again."""
        ctx, m = self.ctx, run.m
        state = self._host_state(run)
        if not run.running and not run.inbound:
            m.status.phase = MaintenancePhase.COMPLETED
            m.status.finished_at = ctx.now()
            m.status.blocking = []
            m.status.message = (
                f"drained: {len(m.status.migrated_vms)} migrated, {len(m.status.stopped_vms)} stopped"
            )
            moves = [(HostEvent.DRAINED, m.status.message)]
            if state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE:
                moves.insert(0, (HostEvent.ERRORS_CORRECTED, "the failed migrations were retried"))
            run.m = await self.save_moving(m, moves)
            return None
        movable = [vm for vm in run.running if vm not in run.failed]
        if run.failed and not movable and not run.in_flight:
            await self._blocked(run, {vm: m.status.progress[vm].message for vm in run.failed}, touched=True)
            return None
        moves = []
        again = any(retrying(progress_of(m, vm)) for vm in run.running)
        if again and state is HostResourceState.PREPARE_FOR_MAINTENANCE:
            moves.append((HostEvent.MIGRATION_FAILED_RETRYABLE, "a migration failed; retrying elsewhere"))
        elif not again and not run.failed and state is HostResourceState.ERROR_IN_PREPARE_FOR_MAINTENANCE:
            moves.append((HostEvent.ERRORS_CORRECTED, "the failed migrations were retried"))
        waiting = len(run.running) + len(run.inbound)
        m.status.message = f"draining: {waiting} VM(s) left" + (
            f", {len(run.inbound)} arriving" if run.inbound else ""
        )
        run.m = await self.save_moving(m, moves)
        return Result(requeue_after=POLL_S)

    async def _stop(self, m: HostMaintenance, vm: VirtualMachine, action: PlanAction) -> None:
        """Durable point: the VM's power intent on the VM (it starts again when the maintenance
        ends), before the VM controller stops it."""
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
            await ctx.durable("maintenance.vm-held", Change(VirtualMachine, vm.metadata.name, hold))
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
