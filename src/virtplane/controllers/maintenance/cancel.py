"""Cancelling a maintenance: nothing new is scheduled, migrations in flight end (finish, or
abort on their timeouts), the host returns to Enabled, the VMs maintenance stopped are
released (their recorded power state starts them again); with ``return_vms`` (the cancel's
own, else the setting ``host.maintenance.return_vms``) the VMs that left get one attempt to come back."""

from __future__ import annotations

from virtplane.controllers.chain import Step, StopChain
from virtplane.controllers.context import Change
from virtplane.controllers.maintenance.tracking import POLL_S, MaintenanceRun, Tracker, progress_of, record
from virtplane.controllers.migration import Started, Waiting, failure_message, in_flight, maintenance_tag
from virtplane.domain.host_states import HostEvent, in_maintenance
from virtplane.domain.intents import read_intents, read_migration, write_intents
from virtplane.domain.phases import MIGRATABLE_PHASES
from virtplane.domain.progress import (
    SETTLED_RETURNS,
    MoveEvent,
    NoSlot,
    NotReturned,
    ProgressState,
    ReturnBegan,
    Returned,
    advance,
)
from virtplane.domain.resources import Host, HostMaintenance, MaintenancePhase, VirtualMachine
from virtplane.reconcile.types import Result


class Cancel(Tracker):
    def chain(self) -> tuple[Step[MaintenanceRun], ...]:
        """The cancel's steps, in order; each does its part or nothing (a drain skips them all)."""
        return (
            Step("cancelling", self.cancelling),  # durable point: Cancelling, nothing new scheduled
            Step("land", self.land),  # migrations in flight end; the host returns to Enabled
            Step("release", self.release),  # the VMs maintenance stopped start again
            Step("return", self.return_vms),  # with return_vms: the VMs that left come back
            Step("cancelled", self.cancelled),
        )

    async def cancelling(self, run: MaintenanceRun) -> Result | None:
        if not run.m.spec.cancel:
            return None
        m = run.m
        if m.status.phase is not MaintenancePhase.CANCELLING:
            m.status.phase = MaintenancePhase.CANCELLING
            m.status.message = "cancelling: no new moves; waiting for migrations in flight"
            self.ctx.event(run.host, "MaintenanceCancelling", "no new moves are scheduled")
            run.m = await self.save(m, durable="maintenance.cancelling")
        return None

    async def land(self, run: MaintenanceRun) -> Result | None:
        if not run.m.spec.cancel:
            return None
        ctx, m, name = self.ctx, run.m, run.name
        ours = [vm for vm, intent in in_flight(ctx.cache) if intent.requested_by == maintenance_tag(name)]
        for vm in ctx.cache.vms_on_host(name) + ours + self._departed(m):
            if vm.metadata.name in m.status.progress or read_migration(vm.metadata.annotations):
                self._observe(m, vm)
        if in_maintenance(self._host_state(run)):
            if ours:
                m.status.message = f"cancelling: waiting for {len(ours)} migration(s) in flight"
                run.m = await self.save(m)
                raise StopChain(Result(requeue_after=POLL_S))
            await self._transition(
                run, HostEvent.CANCEL, "maintenance cancelled", "maintenance.host-returned"
            )
        return None

    async def release(self, run: MaintenanceRun) -> Result | None:
        if run.m.spec.cancel:
            await self._release(run.name)
        return None

    async def return_vms(self, run: MaintenanceRun) -> Result | None:
        if not run.m.spec.cancel:
            return None
        return_vms = run.m.spec.return_vms
        if return_vms is None:  # not said with the cancel: the setting decides
            return_vms = self.ctx.settings.get_bool("host.maintenance.return_vms")
        if return_vms and not await self._return_vms(run.m, run.host):
            run.m = await self.save(run.m)
            raise StopChain(Result(requeue_after=POLL_S))
        return None

    async def cancelled(self, run: MaintenanceRun) -> Result | None:
        if not run.m.spec.cancel:
            return None
        m = run.m
        m.status.phase = MaintenancePhase.CANCELLED
        m.status.finished_at = self.ctx.now()
        m.status.message = "cancelled: the host is back in service"
        self.ctx.event(run.host, "MaintenanceCancelled", m.status.message)
        run.m = await self.save(m)
        raise StopChain(None)

    async def _release(self, host: str) -> None:
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

            ctx.event(vm, "MaintenanceReleased", f"the maintenance of {host} ended; the VM starts again")
            # with the event above; the VM controller starts it once it sees this
            await ctx.durable("maintenance.vm-released", Change(VirtualMachine, vm.metadata.name, release))

    async def _return_vms(self, m: HostMaintenance, host: Host) -> bool:
        """Migrate back the VMs that left, where there is room; True once nothing is left to do."""
        name = host.metadata.name
        done = True
        for vm_name, went_to in sorted(m.status.migrated_vms.items()):
            progress = progress_of(m, vm_name)
            if progress.state in SETTLED_RETURNS:
                continue
            vm = self.ctx.read(VirtualMachine, vm_name)
            event: MoveEvent | None = None
            if vm is None:
                event = NotReturned("the VM is gone")
            elif read_migration(vm.metadata.annotations) is not None:
                done = False
            elif vm.status.host == name:
                event = Returned(name)
            elif progress.state is ProgressState.RETURNING:
                event = NotReturned(failure_message(vm))
            elif vm.status.host != went_to or vm.status.phase not in MIGRATABLE_PHASES:
                event = NotReturned(
                    f"the VM is {vm.status.phase.value} on {vm.status.host}; left where it is"
                )
            else:
                choice = self.coordinator.choose_target(vm, only=name)
                if choice.host is None:
                    event = NotReturned(f"no room to return: {choice.reasons.get(name, 'unknown')}")
                else:
                    result = await self.coordinator.begin(
                        vm_name, name, requested_by=maintenance_tag(name), attempt=1
                    )
                    if isinstance(result, Started):
                        event, done = ReturnBegan(name), False
                    elif isinstance(result, Waiting):
                        event, done = NoSlot(result.message), False
                    else:
                        event = NotReturned(result.message)
            record(m, vm_name, advance(progress, event) if event is not None else progress)
        return done
