"""The follower (the controller of kind ``Migration``, keyed by VM name): it follows every
VM that carries a migration intent, reading the truth from the drivers, never from memory
(``controllers.migration_outcome.locate``).

A job that completed, or a domain running on the target, is finalised: copied volumes point
at the target's pool, the source copies are deleted, then ``status.host`` = target and the
intent cleared in one write. A job that failed or was aborted, or no job and the domain
still on the source (a control-plane restart), is a failed attempt: the intent is cleared
and the VM keeps running where it was. A migration is aborted when it makes no progress for
``progress_timeout_s``, runs longer than ``completion_timeout_per_gib_s`` x GiB of memory and
copied disk, or its requester is gone (a superseded operation, a deleted VM, a stop asked
meanwhile). The outcome is left on the VM for requesters: condition ``Migration``
(True/Migrated or False/MigrationFailed with the error) and ``status.host``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from virtplane.controllers.chain import Step, StopChain, run_chain
from virtplane.controllers.context import Change, ControllerContext
from virtplane.controllers.lookup import host_driver
from virtplane.controllers.migration.coordinator import KIND, MigrationCoordinator
from virtplane.controllers.migration.flights import (
    FlightState,
    completion_deadline_s,
    requesting_operation,
)
from virtplane.controllers.migration_outcome import Location, Outcome, Side, locate
from virtplane.controllers.scheduling import vm_view
from virtplane.controllers.seed import delete_seeds, strike_seeds
from virtplane.controllers.storage import pool_ref, volume_file
from virtplane.controllers.watch import Watch, name_of
from virtplane.domain.conditions import VMCondition, get_condition, place, remove_condition, set_condition
from virtplane.domain.intents import MigrationIntent, read_intents, read_migration, write_migration
from virtplane.domain.migration_policy import post_copy_due
from virtplane.domain.phases import LIVE_STATES
from virtplane.domain.pools import pool_driver_name
from virtplane.domain.resources import (
    ConditionStatus,
    Host,
    PoolKind,
    Resource,
    VirtualMachine,
    VirtualMachineOperation,
    Volume,
)
from virtplane.domain.seeds import SeedVolume, read_seed_volumes
from virtplane.drivers.base import HypervisorDriver, MigrationJob, domain_name
from virtplane.drivers.errors import DriverError, HostUnreachable, NotFound
from virtplane.metrics import MigrationResult
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache

log = logging.getLogger("virtplane.controllers.migration")

POLL_S = 1.0
POLL_UNREACHABLE_S = 5.0


@dataclass
class FlightRun:
    """One look at a migration in flight: the VM, its intent, and what the hosts said."""

    vm: VirtualMachine
    intent: MigrationIntent
    watch: FlightState
    src: HypervisorDriver | None = None
    source_reachable: bool = False
    job: MigrationJob | None = None
    where: Location = field(default_factory=lambda: Location(Outcome.UNKNOWN))

    @property
    def dname(self) -> str:
        return domain_name(self.vm.metadata.uid)


class MigrationFollower:
    """One look: the steps below, in order, over a ``FlightRun``; the first that sees its outcome
    ends the look."""

    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.coordinator = coordinator
        self.steps: tuple[Step[FlightRun], ...] = (
            Step("locate", self.locate),  # from both hosts and the source's job, never from memory
            Step("running", self.running),  # progress; abort on a timeout or a requester gone; post-copy
            Step("arrived", self.arrived),  # volumes repointed, the source cleaned, then one write
            Step("unknown", self.unknown),  # neither host can say: wait, and touch nothing anywhere
            Step("failed", self.failed),  # the intent cleared; the VM stays where it was
        )

    async def __call__(self, req: Request) -> Result | None:
        name = req.name
        vm = self.ctx.read(VirtualMachine, name)
        if vm is None or read_migration(vm.metadata.annotations) is None:
            self.coordinator.flights.pop(name, None)
            return None
        async with self.coordinator.vm_lock(name):
            vm = self.ctx.read(VirtualMachine, name)  # again, under the lock
            intent = read_migration(vm.metadata.annotations) if vm is not None else None
            if vm is None or intent is None:
                self.coordinator.flights.pop(name, None)
                return None
            watch = self.coordinator.flights.setdefault(name, FlightState(progress_at=self.ctx.now()))
            result, _ = await run_chain(self.steps, FlightRun(vm, intent, watch))
            return result

    async def locate(self, run: FlightRun) -> Result | None:
        ctx, intent, dname = self.ctx, run.intent, run.dname
        src_host, run.src, _ = await host_driver(ctx, intent.source)
        dst_host, dst, _ = await host_driver(ctx, intent.target)
        target_uri = dst_host.spec.uri if dst_host else ""
        source, target = (
            await self._observe(src_host, run.src, dname),
            await self._observe(dst_host, dst, dname),
        )
        job: MigrationJob | None = None
        if source.reachable and run.src is not None:
            try:
                job = await run.src.migration_job(dname)
            except HostUnreachable:
                source = Side(reachable=False)
        if job is not None and job.target_uri and job.target_uri != target_uri:
            job = None  # a job of an earlier attempt, to another target
        run.watch.job = run.job = job
        run.source_reachable = source.reachable
        run.where = locate(job, source, target)
        return None

    async def running(self, run: FlightRun) -> Result | None:
        if run.where.outcome is not Outcome.RUNNING:
            return None
        assert run.src is not None and run.job is not None
        raise StopChain(await self._running(run.vm, run.intent, run.job, run.watch, run.src, run.dname))

    async def arrived(self, run: FlightRun) -> Result | None:
        if run.where.outcome is not Outcome.ARRIVED:
            return None
        raise StopChain(await self._finalise(run.vm, run.intent, run.src if run.source_reachable else None))

    async def unknown(self, run: FlightRun) -> Result | None:
        if run.where.outcome is not Outcome.UNKNOWN:
            return None
        await self._waiting(run.vm, run.intent, run.where.why)
        raise StopChain(Result(requeue_after=POLL_UNREACHABLE_S))

    async def failed(self, run: FlightRun) -> Result | None:
        error = f"aborted: {run.watch.abort_reason}" if run.watch.abort_reason else run.where.why
        await self.coordinator.fail(run.vm.metadata.name, run.intent, error)
        return None

    async def _observe(self, host: Host | None, driver: HypervisorDriver | None, dname: str) -> Side:
        """What ``host`` says about the domain; a fenced host is known to run nothing."""
        if driver is None:
            fenced = host is not None and host.spec.fenced
            return Side(reachable=fenced)
        try:
            return Side(reachable=True, info=await driver.get_info(dname))
        except HostUnreachable:
            return Side(reachable=False)

    async def _waiting(self, vm: VirtualMachine, intent: MigrationIntent, why: str) -> None:
        message = f"waiting to learn where the VM runs: {why}"
        current = get_condition(vm.status.conditions, VMCondition.MIGRATION)
        if current is not None and current.message == message:
            return
        log.info("migration of %s to %s: %s", vm.metadata.name, intent.target, message)

        def note(current: VirtualMachine) -> None:
            current.status.conditions = set_condition(
                current.status.conditions,
                VMCondition.MIGRATION,
                ConditionStatus.UNKNOWN,
                "LocationUnknown",
                message,
                now=self.ctx.now(),
            )

        await self.coordinator.write_vm("migration.location-unknown", vm.metadata.name, note)

    def _overdue(self, vm: VirtualMachine, intent: MigrationIntent) -> bool:
        per_gib = self.ctx.settings.get_int("migration.completion_timeout_per_gib_s")
        copied = sum(vm_view(self.ctx.cache, vm).local_disks_gib.values()) if intent.copy_storage else 0
        limit = completion_deadline_s(vm.spec.memory_mib, copied, per_gib)
        return (self.ctx.now() - intent.started_at).total_seconds() > limit

    def _abort_reason(self, vm: VirtualMachine, intent: MigrationIntent, watch: FlightState) -> str:
        ctx = self.ctx
        if vm.metadata.deletion_requested_at is not None:
            return "the VM is being deleted"
        intents = read_intents(vm.metadata.annotations)
        if intents.stop is not None or intents.restart is not None:
            return "a stop or restart of the VM was asked"
        owner = requesting_operation(intent.requested_by)
        if owner is not None:
            op = ctx.read(VirtualMachineOperation, owner)
            if op is None or op.status.phase.finished:
                return f"operation {owner} is {'gone' if op is None else op.status.phase.value}"
        now = ctx.now()
        progress_timeout = ctx.settings.get_int("migration.progress_timeout_s")
        if watch.progress_at is not None and (now - watch.progress_at).total_seconds() > progress_timeout:
            return f"no progress for {progress_timeout}s"
        if self._overdue(vm, intent):
            per_gib = ctx.settings.get_int("migration.completion_timeout_per_gib_s")
            return f"not completed within the completion timeout ({per_gib}s per GiB)"
        return ""

    async def _running(
        self,
        vm: VirtualMachine,
        intent: MigrationIntent,
        job: MigrationJob,
        watch: FlightState,
        src: HypervisorDriver,
        dname: str,
    ) -> Result:
        now = self.ctx.now()
        if job.data_processed_mib > watch.processed_mib:
            watch.processed_mib = job.data_processed_mib
            watch.progress_at = now
        if job.iteration > 0:  # a dirty rate is measured once memory is being sent
            watch.max_dirty_rate_mib_s = max(watch.max_dirty_rate_mib_s or 0.0, job.dirty_rate_mib_s)
        if job.post_copy:
            # past the point of no return: the guest runs on the target, part of its memory is
            # still here, and no abort can bring it back; only the outcome is waited for
            return Result(requeue_after=POLL_S)
        reason = watch.abort_reason or self._abort_reason(vm, intent, watch)
        if reason:  # an abort wins over a switch to post-copy due at the same time
            if not watch.abort_reason:
                watch.abort_reason = reason
                self.ctx.event(
                    vm,
                    "MigrationAborting",
                    f"aborting the migration to {intent.target}: {reason}",
                    warning=True,
                )
            with contextlib.suppress(NotFound):
                await src.abort_migration(dname)
            return Result(requeue_after=0.05)
        await self._maybe_post_copy(vm, intent, watch, src, dname)
        progress_timeout = self.ctx.settings.get_int("migration.progress_timeout_s")
        return Result(requeue_after=min(POLL_S, max(0.05, progress_timeout / 4)))

    async def _maybe_post_copy(
        self,
        vm: VirtualMachine,
        intent: MigrationIntent,
        watch: FlightState,
        src: HypervisorDriver,
        dname: str,
    ) -> None:
        """Switch to post-copy once the policy's bound has passed without convergence; the bound
        counts from the intent's start, so a control plane that restarted keeps the same one."""
        policy = self.coordinator.policy_of(vm)
        running_s = (self.ctx.now() - intent.started_at).total_seconds()
        if watch.post_copy_refused or not post_copy_due(policy, running_s, in_post_copy=False):
            return
        try:
            await src.start_post_copy(dname)
        except DriverError as exc:
            watch.post_copy_refused = True
            self.ctx.event(vm, "PostCopyRefused", f"could not switch to post-copy: {exc}", warning=True)
            return
        self.ctx.event(
            vm,
            "MigrationPostCopy",
            f"not converged after {policy.post_copy_after_s}s: switched to post-copy; the guest now "
            f"runs on {intent.target} and a failure of {intent.source}, {intent.target} or the link "
            "between them loses it until the copy ends",
            warning=True,
        )

    async def _finalise(
        self, vm: VirtualMachine, intent: MigrationIntent, src: HypervisorDriver | None
    ) -> Result | None:
        ctx = self.ctx
        left_seeds: list[SeedVolume] = []
        if intent.copy_storage:
            await self._move_volumes(vm, intent, src)
            left_seeds = await self._delete_source_seeds(vm, intent)
        if src is not None:
            dname = domain_name(vm.metadata.uid)
            try:
                leftover = await src.get_info(dname)
                if leftover is not None and leftover.state not in LIVE_STATES:
                    await src.undefine(dname)
            except DriverError as exc:
                log.info("could not remove the source definition of %s: %s", dname, exc)

        now = ctx.now()

        def finish(current: VirtualMachine) -> None:
            current.metadata.annotations = write_migration(current.metadata.annotations, None)
            self.coordinator.record_dirty_rate(current)
            strike_seeds(left_seeds)(current)
            place(current.status, intent.target, "Migrated", now=now)
            # The condition speaks of a migration under way or of one that failed; once the VM
            # has arrived neither holds (the Migrated event and the operation keep the record).
            current.status.conditions = remove_condition(current.status.conditions, VMCondition.MIGRATION)

        # the events first: the VM's write that says it arrived carries them
        ctx.event(vm, "Migrated", f"now on {intent.target} (from {intent.source}, attempt {intent.attempt})")
        ctx.event(("Host", intent.source), "VMMigratedOut", f"VM {vm.metadata.name} left for {intent.target}")
        ctx.event(
            ("Host", intent.target), "VMMigratedIn", f"VM {vm.metadata.name} arrived from {intent.source}"
        )
        await self.coordinator.write_vm("migration.arrived", vm.metadata.name, finish)
        self.coordinator.flights.pop(vm.metadata.name, None)
        ctx.metrics.migration_ended(MigrationResult.COMPLETED)
        return None  # its slot is free: who waits for one looks again (the watches on the intent's end)

    async def _delete_source_seeds(self, vm: VirtualMachine, intent: MigrationIntent) -> list[SeedVolume]:
        """The seed copies in the source's local pools (the target has its own): delete them and
        return the ones gone, to take off the VM's record. One that cannot go now stays on the
        record, for the next define or the VM's deletion."""
        source_pools = {p.metadata.name for p in self.coordinator.local_pools_of(intent.source)}
        left = [seed for seed in read_seed_volumes(vm.metadata.annotations) if seed.pool in source_pools]
        try:
            return await delete_seeds(self.ctx, left)
        except DriverError as exc:
            self.ctx.event(
                vm, "SourceCopyLeft", f"could not delete the seed on {intent.source}: {exc}", warning=True
            )
            return []

    async def _move_volumes(
        self, vm: VirtualMachine, intent: MigrationIntent, src: HypervisorDriver | None
    ) -> None:
        """Copied local disks: point each Volume at the target's pool, then delete the source copy."""
        ctx = self.ctx
        for disk in vm.spec.disks:
            volume = ctx.read(Volume, disk.volume)
            pool = ctx.cache.pool(volume.spec.pool) if volume else None
            if volume is None or pool is None or pool.spec.kind is not PoolKind.LOCAL:
                continue
            driver_name = pool_driver_name(pool)
            if pool.spec.host == intent.source:
                target_pool = next(
                    (
                        p
                        for p in self.coordinator.local_pools_of(intent.target)
                        if pool_driver_name(p) == driver_name
                    ),
                    None,
                )
                if target_pool is None:
                    ctx.event(
                        vm,
                        "VolumeNotMoved",
                        f"{intent.target} has no local pool {driver_name} resource for volume {volume.metadata.name}",
                        warning=True,
                    )
                    continue

                def repoint(current: Volume, to: str = target_pool.metadata.name) -> None:
                    current.spec.pool = to

                ctx.event(volume, "Moved", f"copied to pool {target_pool.metadata.name} on {intent.target}")
                await ctx.durable(
                    "migration.volume-moved",
                    Change(
                        Volume,
                        volume.metadata.name,
                        repoint,
                        spec_because="its disk was copied to the target",
                    ),
                )
            source_pool = next(
                (
                    p
                    for p in self.coordinator.local_pools_of(intent.source)
                    if pool_driver_name(p) == driver_name
                ),
                None,
            )
            if source_pool is None or src is None:
                continue
            try:
                await src.delete_volume(pool_ref(source_pool), volume_file(volume))
            except DriverError as exc:
                ctx.event(
                    vm,
                    "SourceCopyLeft",
                    f"could not delete the copy of {volume.metadata.name} on {intent.source}: {exc}",
                    warning=True,
                )


# --------------------------------------------------------------------------- watches


def _vm_with_intent(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A VM that carries a migration intent, or just lost one (followed once more, to forget it)."""
    vms = [vm for vm in (old, new) if isinstance(vm, VirtualMachine)]
    if not any(read_migration(vm.metadata.annotations) is not None for vm in vms):
        return []
    return [Request(KIND, name_of(old, new))]


WATCHES = (Watch(VirtualMachine.KIND, _vm_with_intent),)
"""The follower's keys are VM names; it has no objects of its own."""
