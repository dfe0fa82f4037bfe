"""The VM controller: keeps each VM's domain in the power state the decision asks for.

One reconcile, in order: deletion → finalizer → disks → observe the domain →
recreate it where it is missing → ``decide`` → store the decision's intents and
exit reason (durable *before* acting) → one driver action → status. Every step
is idempotent; a crash anywhere re-runs it from the stored state.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.lookup import BootImages, host_driver, vm_boot, vm_disks
from virtplane.controllers.memory_resume import start_domain
from virtplane.controllers.migration_outcome import LIVE
from virtplane.controllers.scheduling import host_views, local_pool_hosts, vm_view
from virtplane.crashpoints import crashpoint
from virtplane.domain.conditions import VMCondition, remove_condition, set_condition
from virtplane.domain.host_states import accepts_vms
from virtplane.domain.intents import MigrationIntent, read_intents, read_migration, write_intents
from virtplane.domain.placement import choose_host, explain
from virtplane.domain.power import PowerAction, PowerInputs, decide, start_retry_delay
from virtplane.domain.resources import (
    ExitReason,
    Host,
    HostConnection,
    VirtualMachine,
    VirtualMachineStatus,
    VMPhase,
)
from virtplane.drivers.base import (
    DiskAttachment,
    DomainInfo,
    DomainSpec,
    DomainState,
    HypervisorDriver,
    domain_name,
)
from virtplane.drivers.errors import DriverError, HostUnreachable, ImageRefused, NotFound, PermanentError
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.vm")

FINALIZER = "virtplane.io/domain"
POLL_TRANSITION_S = 1.0
POLL_UNREACHABLE_S = 5.0
POLL_UNSCHEDULABLE_S = 10.0


def build_domain_spec(
    vm: VirtualMachine,
    disks: list[DiskAttachment],
    console_dir: str | None = None,
    boot_images: BootImages = (None, None),
) -> DomainSpec:
    boot = vm.spec.boot
    name = domain_name(vm.metadata.uid)
    return DomainSpec(
        name=name,
        vm_name=vm.metadata.name,
        vm_uid=vm.metadata.uid,
        cpu=vm.spec.cpu,
        memory_mib=vm.spec.memory_mib,
        disks=tuple(disks),
        kernel=boot_images[0],
        initrd=boot_images[1],
        cmdline=boot.cmdline if boot else "",
        console_log=f"{console_dir}/{name}.log" if console_dir else None,
    )


class VMReconciler:
    def __init__(self, ctx: ControllerContext, *, console_dir: str | None = None) -> None:
        self.ctx = ctx
        self.console_dir = console_dir

    # ------------------------------------------------------------------ helpers

    def _disks(self, vm: VirtualMachine) -> tuple[list[DiskAttachment], str]:
        """The VM's disks, or why it cannot be defined (its disks or boot images are not ready)."""
        disks, problem = vm_disks(self.ctx.cache, vm)
        return disks, problem or vm_boot(self.ctx.cache, vm)[1]

    def _spec(self, vm: VirtualMachine, disks: list[DiskAttachment]) -> DomainSpec:
        return build_domain_spec(vm, disks, self.console_dir, vm_boot(self.ctx.cache, vm)[0])

    async def _driver(self, host_name: str | None) -> tuple[Host | None, HypervisorDriver | None, str]:
        return await host_driver(self.ctx, host_name)

    def _place(self, vm: VirtualMachine) -> tuple[str | None, str]:
        view = vm_view(self.ctx.cache, vm)
        pinned = local_pool_hosts(self.ctx.cache, vm)
        if pinned is not None:
            affinity = pinned if not view.host_affinity else pinned & view.host_affinity
            view = replace(view, host_affinity=frozenset(affinity) or frozenset({"-"}))
        choice = choose_host(replace(view, host=None), host_views(self.ctx.cache))
        return choice.host, explain(choice)

    def _host_usable(self, host: Host | None) -> bool:
        return (
            host is not None
            and accepts_vms(host.status.resource_state)
            and host.status.connection is HostConnection.UP
        )

    # ------------------------------------------------------------------ reconcile

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        vm = ctx.store.find(VirtualMachine, req.name)
        if vm is None:
            return None
        migration = read_migration(vm.metadata.annotations)
        if migration is not None:
            return await self._migrating(vm, migration)
        if vm.metadata.deletion_requested_at is not None:
            return await self._delete(vm)
        if FINALIZER not in vm.metadata.finalizers:
            vm.metadata.finalizers.append(FINALIZER)
            written = ctx.write(vm)
            assert isinstance(written, VirtualMachine)
            vm = written

        now = ctx.now()
        status = vm.status.model_copy(deep=True)
        annotations = dict(vm.metadata.annotations)
        intents = read_intents(annotations)
        disks, disk_problem = self._disks(vm)
        status.conditions = (
            set_condition(
                status.conditions, VMCondition.DISKS_READY, False, "DiskNotReady", disk_problem, now=now
            )
            if disk_problem
            else set_condition(status.conditions, VMCondition.DISKS_READY, True, "Ready", now=now)
        )

        host, driver, host_problem = await self._driver(vm.status.host)
        if host_problem:
            status.conditions = set_condition(
                status.conditions, VMCondition.HOST_REACHABLE, False, "HostUnreachable", host_problem, now=now
            )
            if host is not None and host.spec.fenced and local_pool_hosts(ctx.cache, vm) is None:
                # The admin confirmed the host is off: what ran there died with it (§3, host down).
                # Released from the host, the run policy decides: start elsewhere, or stay stopped.
                was_live = status.phase not in (VMPhase.STOPPED,)
                status.host = None
                if was_live:
                    status.last_exit = ExitReason.HOST_FAILURE
                    status.last_exit_at = now
                status.phase = VMPhase.STOPPED
                ctx.event(
                    vm,
                    "HostFenced",
                    f"host {host.metadata.name} is fenced: the VM is released from it",
                    warning=True,
                )
                return await self._finish(vm, status, annotations, 0.01)
            if host is not None:  # the host exists but cannot be reached: wait, never guess
                return await self._finish(vm, status, annotations, POLL_UNREACHABLE_S)
        else:
            status.conditions = remove_condition(status.conditions, VMCondition.HOST_REACHABLE)

        info: DomainInfo | None = None
        dname = domain_name(vm.metadata.uid)
        try:
            if driver is not None:
                info = await driver.get_info(dname)
                if info is not None and info.migrated_away:
                    # It left this host by live migration though no migration is recorded: find
                    # where it runs before anything could start a second copy here.
                    found, unasked = await self._find_elsewhere(vm, dname)
                    if found is not None:
                        status.host = found
                        ctx.event(vm, "Located", f"the domain runs on {found}, not {vm.status.host}")
                        return await self._finish(vm, status, annotations, 0.01)
                    if unasked:
                        status.message = f"it left {vm.status.host} by migration; cannot ask {unasked}"
                        return await self._finish(vm, status, annotations, POLL_UNREACHABLE_S)
                    await driver.undefine(dname)
                    info = None
                # The domain is (re)created where it is missing: this is where a restore's
                # power-state intent gets consumed, after the domain exists again.
                if info is None and not disk_problem and not intents.held_by:
                    await driver.ensure_defined(self._spec(vm, disks))
                    crashpoint("vm.domain-recreated")
                    info = await driver.get_info(dname)
                elif (
                    info is not None
                    and info.state is DomainState.SHUTOFF
                    and not disk_problem
                    and vm.metadata.generation != status.observed_generation
                ):
                    await driver.ensure_defined(self._spec(vm, disks))
        except HostUnreachable as exc:
            status.conditions = set_condition(
                status.conditions, VMCondition.HOST_REACHABLE, False, "HostUnreachable", str(exc), now=now
            )
            return await self._finish(vm, status, annotations, POLL_UNREACHABLE_S)
        except (ImageRefused, NotFound) as exc:  # a boot image the host does not have, or refuses
            status.conditions = set_condition(
                status.conditions, VMCondition.DISKS_READY, False, "ImageRefused", str(exc), now=now
            )
            return await self._finish(vm, status, annotations, POLL_UNSCHEDULABLE_S)

        if (info is not None and info.state is DomainState.SHUTOFF) or (info is None and driver is None):
            status.observed_generation = vm.metadata.generation

        stopping_since = status.stopping_since
        grace = timedelta(seconds=vm.spec.termination_grace_period_s)
        inputs = PowerInputs(
            run_policy=vm.spec.run_policy,
            domain_state=info.state.value if info else None,
            exit_reason=info.exit_reason if info else None,
            last_exit=status.last_exit,
            intents=intents,
            held=bool(intents.held_by),
            was_running=status.phase
            in (VMPhase.RUNNING, VMPhase.STARTING, VMPhase.PAUSED, VMPhase.MIGRATING),
            grace_expired=stopping_since is not None and now - stopping_since >= grace,
            start_backoff=status.next_start_at is not None and now < status.next_start_at,
        )
        decision = decide(inputs)

        # Durable first: the intents and exit reason the decision implies are stored before
        # any driver call, so a crash after the call finds them.
        new_annotations = write_intents(annotations, decision.intents)
        if decision.last_exit != status.last_exit:
            status.last_exit = decision.last_exit
            status.last_exit_at = now
            if decision.last_exit is not None:
                ctx.event(
                    vm,
                    "Exited",
                    f"domain stopped: {decision.last_exit.value}",
                    warning=decision.last_exit
                    in (
                        ExitReason.CRASH,
                        ExitReason.START_FAILED,
                        ExitReason.VANISHED,
                        ExitReason.HOST_FAILURE,
                    ),
                )
        if info is not None and info.state is DomainState.RUNNING:
            status.start_failures = 0
            status.next_start_at = None
            status.conditions = remove_condition(status.conditions, VMCondition.START_FAILED)
        if decision.phase is not VMPhase.STOPPING:
            # the grace period belongs to a stop under way; once none is, it must not linger
            # (a stale one would requeue this VM in a tight loop)
            status.stopping_since = None
        status.phase = decision.phase
        status.message = decision.message
        if intents.held_by:
            status.conditions = set_condition(
                status.conditions,
                VMCondition.MAINTENANCE,
                True,
                "HeldByOperation",
                f"held by {intents.held_by}",
                now=now,
            )
        else:
            status.conditions = remove_condition(status.conditions, VMCondition.MAINTENANCE)
        status.conditions = set_condition(
            status.conditions,
            VMCondition.READY,
            info is not None and info.state is DomainState.RUNNING,
            decision.reason,
            decision.message,
            now=now,
        )
        if decision.action is PowerAction.START and disk_problem:
            status.phase = VMPhase.PENDING
            return await self._finish(vm, status, new_annotations, POLL_TRANSITION_S * 2)

        vm = await self._persist(vm, status, new_annotations)
        status = vm.status.model_copy(deep=True)

        if decision.action is PowerAction.NONE:
            requeue = None
            if status.phase in (VMPhase.STARTING, VMPhase.STOPPING, VMPhase.MIGRATING):
                requeue = POLL_TRANSITION_S
            if decision.reason == "StartBackoff" and status.next_start_at is not None:
                requeue = max(0.05, (status.next_start_at - now).total_seconds())
            if status.stopping_since is not None and status.phase is VMPhase.STOPPING:
                remaining = (status.stopping_since + grace - now).total_seconds()
                requeue = max(0.05, min(requeue or remaining, remaining))
            return Result(requeue_after=requeue) if requeue else None

        if decision.action is PowerAction.START:
            return await self._start(vm, host, driver, disks, dname)

        assert driver is not None
        try:
            if decision.action is PowerAction.STOP:
                await driver.shutdown(dname)
                status.stopping_since = status.stopping_since or now
                ctx.event(
                    vm,
                    "Stopping",
                    f"graceful shutdown ({decision.message}), "
                    f"forced after {vm.spec.termination_grace_period_s}s",
                )
            else:
                await driver.destroy(dname)
                ctx.event(vm, "ForceStopped", f"powered off ({decision.message})")
        except NotFound:
            pass
        await self._persist(vm, status, vm.metadata.annotations)
        return Result(requeue_after=POLL_TRANSITION_S)

    async def _find_elsewhere(self, vm: VirtualMachine, dname: str) -> tuple[str | None, str]:
        """The other host where the VM's domain is live, asking every host (a rare path), and
        the hosts that could not be asked ("" when all answered)."""
        unasked = []
        for host in self.ctx.cache.hosts():
            if host.metadata.name == vm.status.host:
                continue
            _, driver, _ = await self._driver(host.metadata.name)
            try:
                info = await driver.get_info(dname) if driver is not None else None
            except DriverError:
                driver = None
            if driver is None:
                if not host.spec.fenced:
                    unasked.append(host.metadata.name)
            elif info is not None and info.state in LIVE:
                return host.metadata.name, ""
        return None, ", ".join(sorted(unasked))

    async def _migrating(self, vm: VirtualMachine, migration: MigrationIntent) -> Result:
        """A migration is in flight: its controller owns the domain and finalises status.host."""
        self.ctx.enqueue("Migration", vm.metadata.name)
        status = vm.status.model_copy(deep=True)
        status.phase = VMPhase.MIGRATING
        status.message = (
            f"migrating from {migration.source} to {migration.target} (attempt {migration.attempt})"
        )
        if status != vm.status:
            await self._persist(vm, status, vm.metadata.annotations)
        return Result(requeue_after=POLL_TRANSITION_S)

    async def _start(
        self,
        vm: VirtualMachine,
        host: Host | None,
        driver: HypervisorDriver | None,
        disks: list[DiskAttachment],
        dname: str,
    ) -> Result | None:
        ctx = self.ctx
        now = ctx.now()
        st = vm.status.model_copy(deep=True)
        if not self._host_usable(host):
            # (Re)place: a host that is gone, full, disabled or in maintenance never gets the start.
            if driver is not None:
                try:
                    await driver.undefine(dname)
                except DriverError as exc:
                    log.info("could not undefine %s on its old host: %s", dname, exc)
            target, why = self._place(vm)
            if target is None:
                st.phase = VMPhase.PENDING
                st.host = None
                st.conditions = set_condition(
                    st.conditions, VMCondition.SCHEDULED, False, "Unschedulable", why, now=now
                )
                await self._persist(vm, st, vm.metadata.annotations)
                return Result(requeue_after=POLL_UNSCHEDULABLE_S)
            st.host = target
            st.conditions = set_condition(
                st.conditions, VMCondition.SCHEDULED, True, "Scheduled", f"placed on {target}", now=now
            )
            vm = await self._persist(
                vm, st, vm.metadata.annotations
            )  # the reservation is durable before the define
            ctx.event(vm, "Scheduled", f"placed on {target} ({why})")
            host, driver, _ = await self._driver(target)
            if driver is None:
                return Result(requeue_after=POLL_UNREACHABLE_S)
            st = vm.status.model_copy(deep=True)
        assert driver is not None
        base = ctx.settings.get_float("vm.start.backoff_base_s")
        cap = ctx.settings.get_float("vm.start.backoff_cap_s")
        attempts = st.start_failures + 1
        try:
            spec = self._spec(vm, disks)
            await driver.ensure_defined(spec)
            st.start_failures = attempts
            st.next_start_at = now + timedelta(seconds=start_retry_delay(attempts, base, cap))
            vm = await self._persist(vm, st, vm.metadata.annotations)
            crashpoint("vm.before-start")
            vm = await start_domain(ctx, vm, driver, spec)  # from a restored snapshot's memory, or cold
        except DriverError as exc:
            delay = start_retry_delay(attempts, base, cap)
            st = vm.status.model_copy(deep=True)
            st.start_failures = attempts
            st.next_start_at = now + timedelta(seconds=delay)
            st.phase = VMPhase.PENDING
            st.conditions = set_condition(
                st.conditions,
                VMCondition.START_FAILED,
                True,
                "StartFailed",
                f"start attempt {attempts} failed: {exc}; next attempt in {delay:.1f}s",
                now=now,
            )
            await self._persist(vm, st, vm.metadata.annotations)
            ctx.event(vm, "StartFailed", f"attempt {attempts}: {exc}; retrying in {delay:.1f}s", warning=True)
            if isinstance(exc, PermanentError) and not isinstance(exc, NotFound):
                log.warning("start of %s failed permanently on this host: %s", vm.metadata.name, exc)
            return Result(requeue_after=max(delay, 0.05))
        if attempts > 1:
            ctx.event(
                vm,
                "StartRetry",
                f"attempt {attempts} after {attempts - 1} failed start(s); last exit: "
                f"{vm.status.last_exit.value if vm.status.last_exit else 'none'}",
                warning=True,
            )
            st = vm.status.model_copy(deep=True)
            st.conditions = set_condition(
                st.conditions,
                VMCondition.START_FAILED,
                True,
                "Retrying",
                f"start attempt {attempts} after {attempts - 1} failed",
                now=now,
            )
            vm = await self._persist(vm, st, vm.metadata.annotations)
        ctx.event(vm, "Started", f"start issued on {vm.status.host} (attempt {attempts})")
        return Result(requeue_after=POLL_TRANSITION_S)

    async def _persist(
        self, vm: VirtualMachine, status: VirtualMachineStatus, annotations: dict[str, str]
    ) -> VirtualMachine:
        new = vm.model_copy(deep=True)
        new.status = status
        new.metadata.annotations = annotations
        written = self.ctx.write(new)
        assert isinstance(written, VirtualMachine)
        return written

    async def _finish(
        self,
        vm: VirtualMachine,
        status: VirtualMachineStatus,
        annotations: dict[str, str],
        requeue: float | None,
    ) -> Result | None:
        await self._persist(vm, status, annotations)
        return Result(requeue_after=requeue) if requeue else None

    async def _delete(self, vm: VirtualMachine) -> Result | None:
        ctx = self.ctx
        host, driver, problem = await self._driver(vm.status.host)
        if host is not None and driver is None:
            ctx.event(
                vm, "DeletionWaiting", f"waiting for its host to remove the domain: {problem}", warning=True
            )
            return Result(requeue_after=POLL_UNREACHABLE_S)
        if driver is not None:
            dname = domain_name(vm.metadata.uid)
            await driver.destroy(dname)
            await driver.undefine(dname)
        if FINALIZER in vm.metadata.finalizers:
            vm.metadata.finalizers.remove(FINALIZER)
            ctx.write(vm)
        if not vm.metadata.finalizers:
            ctx.store.delete(VirtualMachine, vm.metadata.name)
            ctx.event(vm, "Deleted", "domain removed and VM deleted")
        return None
