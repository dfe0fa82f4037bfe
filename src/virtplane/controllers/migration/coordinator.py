"""The migration coordinator: targets, slots and the durable intent; one per control plane.

It serves every requester (host maintenance, the Migrate and Evict operations):

- ``choose_target`` picks a host with room (migrations in flight hold room on their targets)
  whose driver, like the source's, can migrate the VM.
- ``begin`` takes a slot under the limits (settings ``migration.max_outbound_per_host``,
  ``max_inbound_per_host``, ``max_per_cluster``), writes the ``MigrationIntent`` to the VM
  in the store, and only then calls the driver's ``migrate``. A requester that finds no
  slot is told so ("waiting for a migration slot: 2/2 outbound from h1").
- ``fail`` ends a failed attempt: the intent goes, the VM keeps running where it was.

Slots are counted from the intents in the cache under one asyncio lock: correct for the one
control-plane process that runs the controllers (the lease holder on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from virtplane.controllers.context import Change, ControllerContext
from virtplane.controllers.lookup import host_driver, vm_boot, vm_cdrom, vm_disks
from virtplane.controllers.migration.flights import (
    BeginResult,
    FlightState,
    Limits,
    Refused,
    Started,
    Waiting,
    in_flight,
    slot_refusal,
)
from virtplane.controllers.registration import MIGRATION_KIND
from virtplane.controllers.scheduling import host_views, vm_view
from virtplane.controllers.seed import place_seed_on_target, record_seed, seed_volume_on_target
from virtplane.controllers.storage import pool_ref
from virtplane.controllers.vm import build_domain_spec, show_migrating
from virtplane.crashpoints import crashpoint
from virtplane.domain.conditions import VMCondition, set_condition
from virtplane.domain.host_states import accepts_vms
from virtplane.domain.intents import MigrationIntent, read_migration, write_migration
from virtplane.domain.migration_policy import EffectivePolicy, effective_policy
from virtplane.domain.phases import MIGRATABLE_PHASES
from virtplane.domain.placement import Choice, HostView, VMView, choose_host, reserve
from virtplane.domain.placement_rules import Rule
from virtplane.domain.progress import InFlight
from virtplane.domain.resources import (
    ConditionStatus,
    Host,
    HostConnection,
    LiveMigrationPolicy,
    PoolKind,
    StoragePool,
    VirtualMachine,
)
from virtplane.domain.seeds import read_seed_volumes
from virtplane.drivers.base import (
    DiskAttachment,
    HypervisorDriver,
    MigrationJob,
    MigrationRequest,
    domain_name,
)
from virtplane.drivers.errors import DriverError
from virtplane.metrics import MigrationResult

log = logging.getLogger("virtplane.controllers.migration")

KIND = MIGRATION_KIND
"""The controller kind that follows migrations in flight; its keys are VM names."""


def policy_of(ctx: ControllerContext, vm: VirtualMachine) -> EffectivePolicy:
    """The VM's migration policy: its spec.migration over the settings of its host (that
    host's override, else its cluster's, else the global value)."""
    host = vm.status.host
    cached = ctx.cache.host(host) if host else None
    cluster = cached.spec.cluster if cached is not None else None

    def setting(key: str) -> Any:
        return ctx.settings.get(f"migration.{key}", cluster=cluster, host=host)

    defaults = EffectivePolicy(
        auto_converge=bool(setting("auto_converge")),
        post_copy_after_s=int(setting("post_copy_after_s")),
        max_downtime_ms=int(setting("max_downtime_ms")),
        bandwidth_mib_s=int(setting("bandwidth_mib_s")),
    )
    return effective_policy(vm.spec.migration, defaults)


class MigrationCoordinator:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self._slot_lock = asyncio.Lock()
        self._vm_locks: dict[str, asyncio.Lock] = {}
        self.flights: dict[str, FlightState] = {}
        """What is remembered of each migration in flight, by VM name (the follower keeps it)."""

    # ------------------------------------------------------------------ views and targets

    def limits(self) -> Limits:
        s = self.ctx.settings
        return Limits(
            s.get_int("migration.max_outbound_per_host"),
            s.get_int("migration.max_inbound_per_host"),
            s.get_int("migration.max_per_cluster"),
        )

    def target_views(self, rules: tuple[Rule, ...] | None = None) -> list[HostView]:
        """Placement views where migrations in flight already hold room on their targets
        (``rules``: the VM-VM rules to count members of, as ``host_views``)."""
        views = {v.name: v for v in host_views(self.ctx.cache, self.ctx.promised, rules)}
        for vm, intent in in_flight(self.ctx.cache):
            view = views.get(intent.target)
            if view is not None:
                views[intent.target] = reserve(view, self._view(vm, intent.copy_storage), intent.copy_storage)
        return list(views.values())

    def _view(self, vm: VirtualMachine, copy_storage: bool) -> VMView:
        view = vm_view(self.ctx.cache, vm)
        return view if copy_storage else replace(view, local_disks_gib={})

    def needs_storage_copy(self, vm: VirtualMachine) -> bool:
        return bool(vm_view(self.ctx.cache, vm).local_disks_gib)

    def choose_target(
        self,
        vm: VirtualMachine,
        *,
        exclude: frozenset[str] = frozenset(),
        only: str | None = None,
        override_rules: bool = False,
        explain: bool = False,
    ) -> Choice:
        """The best target for ``vm`` now (Enabled, connected, room, pools, placement rules, and
        drivers on both ends that can migrate it). ``override_rules``: an admin's forced
        migration, which required placement rules do not stop; ``explain``: every ranked host's
        verdict too."""
        copy = self.needs_storage_copy(vm)
        view = vm_view(self.ctx.cache, vm)
        hosts = self.target_views(view.rules)
        candidates = None
        if only is not None:
            if not any(h.name == only for h in hosts):
                return Choice(host=None, reasons={only: "no such host"})
            candidates = frozenset({only})  # the other hosts still count: where the rules' VMs run
        return choose_host(
            view,
            hosts,
            exclude=exclude,
            copy_local_disks=copy,
            migration=True,
            real_use=self.ctx.real_use(),
            candidates=candidates,
            override_rules=override_rules,
            explain=explain,
        )

    def waiting_for_slot(self, source: str | None, target: str) -> str:
        """Why a migration from ``source`` to ``target`` would wait for a slot, as the cache sees
        it ("" when one looks free). A cheap look before the store reads of ``begin``, which
        decide: a drain asks for every waiting VM each time a slot frees."""
        if source is None:
            return ""
        flights = [i for _, i in in_flight(self.ctx.cache)]
        cluster_of = {h.metadata.name: h.spec.cluster for h in self.ctx.cache.hosts()}
        return slot_refusal(flights, source, target, cluster_of, self.limits())

    def job_of(self, vm_name: str) -> MigrationJob | None:
        """The last job seen for the VM's migration in flight (for progress displays)."""
        flight = self.flights.get(vm_name)
        return flight.job if flight else None

    def progress_pct(self, vm_name: str) -> float:
        job = self.job_of(vm_name)
        if job is None or job.data_total_mib <= 0:
            return 0.0
        return round(100.0 * job.data_processed_mib / job.data_total_mib, 1)

    def in_flight(self, vm_name: str, intent: MigrationIntent, *, returning: bool = False) -> InFlight:
        """The progress event of the VM's migration under way, with what the hypervisor measures."""
        job = self.job_of(vm_name)
        return InFlight(
            intent.target,
            intent.attempt,
            self.progress_pct(vm_name),
            returning=returning,
            dirty_rate_mib_s=round(job.dirty_rate_mib_s, 1) if job else 0.0,
            remaining_mib=round(job.memory_remaining_mib, 1) if job else 0.0,
            iteration=job.iteration if job else 0,
            post_copy=job.post_copy if job else False,
        )

    def policy_of(self, vm: VirtualMachine) -> EffectivePolicy:
        return policy_of(self.ctx, vm)

    def record_dirty_rate(self, vm: VirtualMachine) -> None:
        """Keep on the VM the highest dirty rate its migration showed (the plan's risk note reads it)."""
        flight = self.flights.get(vm.metadata.name)
        if flight is not None and flight.max_dirty_rate_mib_s is not None:
            vm.status.migration_dirty_rate_mib_s = round(flight.max_dirty_rate_mib_s, 1)

    def vm_lock(self, name: str) -> asyncio.Lock:
        """Held while one VM's migration is started or followed."""
        return self._vm_locks.setdefault(name, asyncio.Lock())

    # ------------------------------------------------------------------ begin

    async def begin(
        self, vm_name: str, target: str, *, requested_by: str, attempt: int, override_rules: bool = False
    ) -> BeginResult:
        """Start migrating ``vm_name`` to ``target`` if a slot is free; the intent is durable first.

        Under the slot lock: the checks, the target's storage, and the intent's write with the
        VM's own lock taken; the VM's lock is held on until the driver was asked (an exit
        stack: it outlives the slot lock, and every way out releases it)."""
        ctx = self.ctx
        cached = ctx.cache.vm(vm_name)
        waiting = self.waiting_for_slot(cached.status.host if cached else None, target)
        if waiting:
            return Waiting(waiting)
        async with contextlib.AsyncExitStack() as held:
            async with self._slot_lock:
                vm = ctx.read(VirtualMachine, vm_name)
                if vm is None:
                    return Refused(f"VM {vm_name} does not exist")
                answer = self._not_now(vm, target, override_rules)
                if answer is not None:
                    return answer
                source, target_host = vm.status.host, ctx.read(Host, target)
                assert source is not None and target_host is not None  # checked by _not_now
                disks, problem = vm_disks(ctx.cache, vm)
                if problem:
                    return Waiting(problem)
                _, src_driver, src_problem = await host_driver(ctx, source)
                _, dst_driver, dst_problem = await host_driver(ctx, target)
                if src_driver is None or dst_driver is None:
                    return Refused(src_problem or dst_problem)
                copy = self.needs_storage_copy(vm)
                if copy:
                    prepared = await self._prepare_target_storage(vm, target, dst_driver)
                    if isinstance(prepared, Refused):
                        return prepared
                    vm = prepared
                intent = MigrationIntent(
                    source=source,
                    target=target,
                    attempt=attempt,
                    requested_by=requested_by,
                    started_at=ctx.now(),
                    copy_storage=copy,
                )
                await held.enter_async_context(self.vm_lock(vm_name))
                # Again, with no await before the write: the looks above awaited drivers, and a
                # start may have been placed on the target meanwhile.
                no_room = self._no_room(vm, target, override_rules)
                if no_room:
                    return no_room
                # Durable first: the intent is on the VM (and counts against the slots)
                # before the driver is asked to move it.
                written = await self.write_vm(
                    "migration.intent-written", vm_name, lambda current: self._set_intent(current, intent)
                )
            self.flights[vm_name] = FlightState(progress_at=ctx.now())
            mode = "with its local disks " if copy else ""
            ctx.event(
                written,
                "MigrationStarted",
                f"live migration {mode}from {source} to {target} (attempt {attempt}, by {requested_by})",
            )
            try:
                await src_driver.migrate(self._request(vm, disks, target_host, copy))
            except DriverError as exc:
                await self.fail(vm_name, intent, f"the source refused the migration: {exc}")
                return Refused(f"migration to {target} refused: {exc}", attempted=True)
        return Started(intent)  # the follower took the intent's write as its cue (its watch)

    def _not_now(self, vm: VirtualMachine, target: str, override_rules: bool = False) -> BeginResult | None:
        """Why ``vm`` cannot begin moving to ``target`` now (refused, or waiting), or None."""
        name = vm.metadata.name
        if read_migration(vm.metadata.annotations) is not None:
            return Waiting(f"VM {name} is migrating already")
        if vm.spec.live_migration_policy is LiveMigrationPolicy.NEVER:
            return Refused(f"VM {name} has live_migration_policy Never")
        if vm.status.host is None:
            return Refused(f"VM {name} runs on no host")
        if vm.status.phase not in MIGRATABLE_PHASES:
            return Waiting(f"VM {name} is {vm.status.phase.value}; it migrates once running")
        target_host = self.ctx.read(Host, target)
        if target_host is None:
            return Refused(f"target host {target} does not exist")
        if not accepts_vms(target_host.status.resource_state):
            return Refused(f"target host {target} is {target_host.status.resource_state.value}")
        if target_host.status.connection is not HostConnection.UP:
            return Refused(f"target host {target} is not connected")
        no_room = self._no_room(vm, target, override_rules)
        if no_room:
            return no_room
        waiting = self.waiting_for_slot(vm.status.host, target)  # again: the look before was unlocked
        return Waiting(waiting) if waiting else None

    async def _prepare_target_storage(
        self, vm: VirtualMachine, target: str, dst_driver: HypervisorDriver
    ) -> VirtualMachine | Refused:
        """The target's local pools, and the VM's seed volume on them (recorded on the VM before
        it is written there: DESIGN.md §1); the VM as written."""
        try:
            target_pools = self.local_pools_of(target)
            for pool in target_pools:
                await dst_driver.ensure_pool(pool_ref(pool))
            copied = seed_volume_on_target(self.ctx.cache, vm, target_pools)
            if copied is not None and copied not in read_seed_volumes(vm.metadata.annotations):
                vm = await self.write_vm("migration.seed-recorded", vm.metadata.name, record_seed(copied))
            await place_seed_on_target(self.ctx.cache, vm, dst_driver)
            crashpoint("migration.seed-copied")
        except DriverError as exc:
            return Refused(f"cannot prepare the local pools of {target}: {exc}")
        return vm

    def _request(
        self, vm: VirtualMachine, disks: list[DiskAttachment], target_host: Host, copy: bool
    ) -> MigrationRequest:
        """What the source's driver is asked: the domain, where to, and the VM's migration policy."""
        policy = self.policy_of(vm)
        return MigrationRequest(
            domain=domain_name(vm.metadata.uid),
            target_uri=target_host.spec.uri,
            migration_address=target_host.spec.migration_address,
            copy_disks=tuple(d.path for d in disks if not d.shared) if copy else (),
            bandwidth_mib_s=policy.bandwidth_mib_s or None,
            auto_converge=policy.auto_converge,
            post_copy=policy.post_copy,
            max_downtime_ms=policy.max_downtime_ms or None,
            spec=build_domain_spec(
                vm, disks, boot_images=vm_boot(self.ctx.cache, vm)[0], cdrom=vm_cdrom(self.ctx.cache, vm)[0]
            ),
        )

    def _no_room(self, vm: VirtualMachine, target: str, override_rules: bool = False) -> Refused | None:
        choice = self.choose_target(vm, only=target, override_rules=override_rules)
        if choice.host == target:
            return None
        return Refused(
            f"target host {target} cannot take VM {vm.metadata.name}: {choice.reasons.get(target)}"
        )

    def _set_intent(self, vm: VirtualMachine, intent: MigrationIntent) -> None:
        if read_migration(vm.metadata.annotations) is not None:
            raise RuntimeError(f"VM {vm.metadata.name} got a migration intent meanwhile")
        vm.metadata.annotations = write_migration(vm.metadata.annotations, intent)
        vm.status.conditions = set_condition(
            vm.status.conditions,
            VMCondition.MIGRATION,
            ConditionStatus.UNKNOWN,
            "Migrating",
            intent.describe(),
            now=self.ctx.now(),
        )
        show_migrating(vm.status, intent)

    async def write_vm(
        self, point: str, name: str, change: Callable[[VirtualMachine], None]
    ) -> VirtualMachine:
        """The migration's writes on its VM are durable points: each is what a restart resumes
        from (the intent before the driver is asked; the seed on the record before it is copied;
        the end)."""
        return await self.ctx.durable(point, Change(VirtualMachine, name, change))

    def local_pools_of(self, host: str) -> list[StoragePool]:
        return [p for p in self.ctx.cache.pools() if p.spec.kind is PoolKind.LOCAL and p.spec.host == host]

    async def fail(self, name: str, intent: MigrationIntent, error: str) -> None:
        """A failed attempt: the intent goes, the VM stays where it runs and says why."""
        ctx = self.ctx
        target = ctx.cache.host(intent.target)
        address = target.spec.migration_address if target is not None else None
        # libvirt's own errors ("Failed to bind socket") do not say where the data was to go
        to = f"{intent.target} (migration address {address})" if address else intent.target

        def clear(current: VirtualMachine) -> None:
            current.metadata.annotations = write_migration(current.metadata.annotations, None)
            self.record_dirty_rate(current)
            current.status.conditions = set_condition(
                current.status.conditions,
                VMCondition.MIGRATION,
                False,
                "MigrationFailed",
                f"attempt {intent.attempt} to {to} failed: {error}",
                now=ctx.now(),
            )

        ctx.event(  # first: the write that clears the intent carries it
            (VirtualMachine.KIND, name),
            "MigrationFailed",
            f"attempt {intent.attempt} to {to} failed, the VM stays on {intent.source}: {error}",
            warning=True,
        )
        await self.write_vm("migration.failed", name, clear)
        self.flights.pop(name, None)
        ctx.metrics.migration_ended(MigrationResult.FAILED)
        # its slot is free: who waits for one looks again (the watches on the intent's end)
