"""Live migration: slots, the durable migration intent, progress, timeouts, finalising.

One ``MigrationCoordinator`` per control plane serves every requester (host
maintenance, the Migrate and Evict operations):

- ``begin`` takes a slot under the limits (settings ``migration.max_outbound_per_host``,
  ``max_inbound_per_host``, ``max_per_cluster``), writes the ``MigrationIntent`` to the VM
  in the store, and only then calls the driver's ``migrate``. A requester that finds no
  slot is told so ("waiting for a migration slot: 2/2 outbound from h1").
- ``reconcile`` (the controller of kind ``Migration``, keyed by VM name) follows every VM
  that carries an intent. It reads the truth from the drivers, never from memory: a job
  that completed, or a domain running on the target, is finalised (copied volumes point at
  the target's pool, the source copies are deleted, then ``status.host`` = target and the
  intent cleared in one write); a job that failed or was aborted, or no job and the domain
  still on the source (a control-plane restart), is a failed attempt: the intent is cleared
  and the VM keeps running where it was. A migration is aborted when it makes no progress
  for ``progress_timeout_s``, runs longer than ``completion_timeout_per_gib_s`` x GiB of
  memory and copied disk, or its requester is gone (a superseded operation, a deleted VM,
  a stop asked meanwhile).

The outcome is left on the VM for requesters: condition ``Migration`` (True/Migrated or
False/MigrationFailed with the error) and ``status.host``.

``MigrationOperations`` carries out Migrate and Evict operations with the same machinery.
Slots are counted from the intents in the cache under one asyncio lock: correct for one
control-plane process (several replicas would need a database lock here).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.lookup import host_driver, vm_boot, vm_disks
from virtplane.controllers.migration_outcome import LIVE, Outcome, Side, locate
from virtplane.controllers.operations import finish_operation
from virtplane.controllers.scheduling import host_views, pool_driver_name, vm_view
from virtplane.controllers.storage import pool_ref, volume_file
from virtplane.controllers.vm import build_domain_spec
from virtplane.domain.conditions import VMCondition, get_condition, set_condition
from virtplane.domain.host_states import accepts_vms
from virtplane.domain.intents import MigrationIntent, read_intents, read_migration, write_migration
from virtplane.domain.placement import Choice, HostView, VMView, choose_host, reserve
from virtplane.domain.resources import (
    ConditionStatus,
    Host,
    HostConnection,
    HostMaintenance,
    LiveMigrationPolicy,
    OperationPhase,
    OperationType,
    PoolKind,
    StoragePool,
    VirtualMachine,
    VirtualMachineOperation,
    VMPhase,
    Volume,
)
from virtplane.drivers.base import (
    DiskAttachment,
    HypervisorDriver,
    MigrationJob,
    MigrationRequest,
    domain_name,
)
from virtplane.drivers.errors import DriverError, HostUnreachable, NotFound
from virtplane.metrics import MigrationResult
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.migration")

KIND = "Migration"
"""The controller kind that follows migrations in flight; its keys are VM names."""

POLL_S = 1.0
POLL_UNREACHABLE_S = 5.0
MIGRATABLE_PHASES = frozenset({VMPhase.RUNNING, VMPhase.PAUSED, VMPhase.DEGRADED})


def maintenance_tag(host: str) -> str:
    return f"maintenance/{host}"


def operation_tag(operation: str) -> str:
    return f"operation/{operation}"


# --------------------------------------------------------------------------- outcomes of begin


@dataclass(frozen=True)
class Started:
    intent: MigrationIntent


@dataclass(frozen=True)
class Waiting:
    """No slot now (or the VM is not migratable yet); ask again later."""

    message: str


@dataclass(frozen=True)
class Refused:
    """This target (or this VM) cannot be used; the driver call, if any, failed at once."""

    message: str
    attempted: bool = False  # True when the intent was written and the driver refused


BeginResult = Started | Waiting | Refused


@dataclass
class _Watch:
    """What the coordinator remembers of a migration in flight (rebuilt after a restart)."""

    processed_mib: float = -1.0
    progress_at: datetime | None = None
    abort_reason: str = ""
    job: MigrationJob | None = None


@dataclass(frozen=True)
class Limits:
    outbound: int
    inbound: int
    cluster: int


# --------------------------------------------------------------------------- pure helpers


def in_flight(vms: list[VirtualMachine]) -> list[tuple[VirtualMachine, MigrationIntent]]:
    result = []
    for vm in vms:
        intent = read_migration(vm.metadata.annotations)
        if intent is not None:
            result.append((vm, intent))
    return result


def slot_refusal(
    flights: list[MigrationIntent], source: str, target: str, cluster_of: dict[str, str], limits: Limits
) -> str:
    """Why a migration from ``source`` to ``target`` must wait for a slot, or "" if one is free."""
    outbound = sum(1 for f in flights if f.source == source)
    if outbound >= limits.outbound:
        return f"waiting for a migration slot: {outbound}/{limits.outbound} outbound from {source}"
    inbound = sum(1 for f in flights if f.target == target)
    if inbound >= limits.inbound:
        return f"waiting for a migration slot: {inbound}/{limits.inbound} inbound to {target}"
    cluster = cluster_of.get(source, "")
    in_cluster = sum(1 for f in flights if cluster_of.get(f.source, "") == cluster)
    if in_cluster >= limits.cluster:
        return f"waiting for a migration slot: {in_cluster}/{limits.cluster} in cluster {cluster}"
    return ""


def completion_deadline_s(memory_mib: int, copied_gib: int, per_gib_s: int) -> float:
    gib = memory_mib / 1024 + copied_gib
    return max(1.0, gib) * per_gib_s


# --------------------------------------------------------------------------- the coordinator


class MigrationCoordinator:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self._slot_lock = asyncio.Lock()
        self._vm_locks: dict[str, asyncio.Lock] = {}
        self._watches: dict[str, _Watch] = {}

    # ------------------------------------------------------------------ views and targets

    def limits(self) -> Limits:
        s = self.ctx.settings
        return Limits(
            s.get_int("migration.max_outbound_per_host"),
            s.get_int("migration.max_inbound_per_host"),
            s.get_int("migration.max_per_cluster"),
        )

    def target_views(self) -> list[HostView]:
        """Placement views where migrations in flight already hold room on their targets."""
        views = {v.name: v for v in host_views(self.ctx.cache)}
        for vm, intent in in_flight(self.ctx.cache.vms()):
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
        self, vm: VirtualMachine, *, exclude: frozenset[str] = frozenset(), only: str | None = None
    ) -> Choice:
        """The best target for ``vm`` now (Enabled, connected, room, pools, anti-affinity, and
        drivers on both ends that can migrate it)."""
        copy = self.needs_storage_copy(vm)
        view = vm_view(self.ctx.cache, vm)
        hosts = self.target_views()
        if only is not None:
            if not any(h.name == only for h in hosts):
                return Choice(host=None, reasons={only: "no such host"})
            hosts = [h for h in hosts if h.name in (only, vm.status.host)]  # the source's driver counts too
        return choose_host(view, hosts, exclude=exclude, copy_local_disks=copy, migration=True)

    def job_of(self, vm_name: str) -> MigrationJob | None:
        """The last job seen for the VM's migration in flight (for progress displays)."""
        watch = self._watches.get(vm_name)
        return watch.job if watch else None

    def progress_pct(self, vm_name: str) -> float:
        job = self.job_of(vm_name)
        if job is None or job.data_total_mib <= 0:
            return 0.0
        return round(100.0 * job.data_processed_mib / job.data_total_mib, 1)

    def _vm_lock(self, name: str) -> asyncio.Lock:
        return self._vm_locks.setdefault(name, asyncio.Lock())

    async def _driver(self, host_name: str) -> tuple[Host | None, HypervisorDriver | None, str]:
        return await host_driver(self.ctx, host_name)

    def _disks(self, vm: VirtualMachine) -> tuple[list[DiskAttachment], str]:
        return vm_disks(self.ctx.cache, vm)

    # ------------------------------------------------------------------ begin

    async def begin(self, vm_name: str, target: str, *, requested_by: str, attempt: int) -> BeginResult:
        """Start migrating ``vm_name`` to ``target`` if a slot is free; the intent is durable first."""
        ctx = self.ctx
        async with self._slot_lock:
            vm = ctx.store.find(VirtualMachine, vm_name)
            if vm is None:
                return Refused(f"VM {vm_name} does not exist")
            if read_migration(vm.metadata.annotations) is not None:
                return Waiting(f"VM {vm_name} is migrating already")
            if vm.spec.live_migration_policy is LiveMigrationPolicy.NEVER:
                return Refused(f"VM {vm_name} has live_migration_policy Never")
            source = vm.status.host
            if source is None:
                return Refused(f"VM {vm_name} runs on no host")
            if vm.status.phase not in MIGRATABLE_PHASES:
                return Waiting(f"VM {vm_name} is {vm.status.phase.value}; it migrates once running")
            target_host = ctx.store.find(Host, target)
            if target_host is None:
                return Refused(f"target host {target} does not exist")
            if not accepts_vms(target_host.status.resource_state):
                return Refused(f"target host {target} is {target_host.status.resource_state.value}")
            if target_host.status.connection is not HostConnection.UP:
                return Refused(f"target host {target} is not connected")
            choice = self.choose_target(vm, only=target)
            if choice.host != target:
                return Refused(f"target host {target} cannot take VM {vm_name}: {choice.reasons.get(target)}")
            flights = [i for _, i in in_flight(ctx.cache.vms())]
            cluster_of = {h.metadata.name: h.spec.cluster for h in ctx.cache.hosts()}
            waiting = slot_refusal(flights, source, target, cluster_of, self.limits())
            if waiting:
                return Waiting(waiting)
            disks, problem = self._disks(vm)
            if problem:
                return Waiting(problem)
            _, src_driver, src_problem = await self._driver(source)
            _, dst_driver, dst_problem = await self._driver(target)
            if src_driver is None or dst_driver is None:
                return Refused(src_problem or dst_problem)
            copy = self.needs_storage_copy(vm)
            if copy:
                try:
                    for pool in self._local_pools_of(target):
                        await dst_driver.ensure_pool(pool_ref(pool))
                except DriverError as exc:
                    return Refused(f"cannot prepare the local pools of {target}: {exc}")
            intent = MigrationIntent(
                source=source,
                target=target,
                attempt=attempt,
                requested_by=requested_by,
                started_at=ctx.now(),
                copy_storage=copy,
            )
            lock = self._vm_lock(vm_name)
            await lock.acquire()
            try:
                # Durable first: the intent is on the VM (and counts against the slots)
                # before the driver is asked to move it.
                written = self._write_vm(vm_name, lambda current: self._set_intent(current, intent))
            except BaseException:
                lock.release()
                raise
        try:
            self._watches[vm_name] = _Watch(progress_at=ctx.now())
            mode = "with its local disks " if copy else ""
            ctx.event(
                written,
                "MigrationStarted",
                f"live migration {mode}from {source} to {target} (attempt {attempt}, by {requested_by})",
            )
            bandwidth = ctx.settings.get_int("migration.bandwidth_mib_s")
            request = MigrationRequest(
                domain=domain_name(vm.metadata.uid),
                target_uri=target_host.spec.uri,
                copy_disks=tuple(d.path for d in disks if not d.shared) if copy else (),
                bandwidth_mib_s=bandwidth or None,
                spec=build_domain_spec(vm, disks, boot_images=vm_boot(self.ctx.cache, vm)[0]),
            )
            try:
                await src_driver.migrate(request)
            except DriverError as exc:
                self._fail(vm_name, intent, f"the source refused the migration: {exc}")
                return Refused(f"migration to {target} refused: {exc}", attempted=True)
        finally:
            lock.release()
        ctx.enqueue(KIND, vm_name)
        return Started(intent)

    def _set_intent(self, vm: VirtualMachine, intent: MigrationIntent) -> None:
        if read_migration(vm.metadata.annotations) is not None:
            raise RuntimeError(f"VM {vm.metadata.name} got a migration intent meanwhile")
        vm.metadata.annotations = write_migration(vm.metadata.annotations, intent)
        vm.status.conditions = set_condition(
            vm.status.conditions,
            VMCondition.MIGRATION,
            ConditionStatus.UNKNOWN,
            "Migrating",
            f"migrating from {intent.source} to {intent.target} (attempt {intent.attempt})",
            now=self.ctx.now(),
        )

    def _write_vm(self, name: str, change: Any) -> VirtualMachine:
        written = self.ctx.mutate(VirtualMachine, name, change)
        return written

    def _local_pools_of(self, host: str) -> list[StoragePool]:
        return [p for p in self.ctx.cache.pools() if p.spec.kind is PoolKind.LOCAL and p.spec.host == host]

    # ------------------------------------------------------------------ following a migration

    async def __call__(self, req: Request) -> Result | None:
        name = req.name
        vm = self.ctx.store.find(VirtualMachine, name)
        if vm is None or read_migration(vm.metadata.annotations) is None:
            self._watches.pop(name, None)
            return None
        async with self._vm_lock(name):
            return await self._follow(name)

    async def _follow(self, name: str) -> Result | None:
        ctx = self.ctx
        vm = ctx.store.find(VirtualMachine, name)
        intent = read_migration(vm.metadata.annotations) if vm is not None else None
        if vm is None or intent is None:
            self._watches.pop(name, None)
            return None
        watch = self._watches.setdefault(name, _Watch(progress_at=ctx.now()))
        dname = domain_name(vm.metadata.uid)
        src_host, src, _ = await self._driver(intent.source)
        dst_host, dst, _ = await self._driver(intent.target)
        target_uri = dst_host.spec.uri if dst_host else ""
        job: MigrationJob | None = None
        source, target = await self._observe(src_host, src, dname), await self._observe(dst_host, dst, dname)
        if source.reachable and src is not None:
            try:
                job = await src.migration_job(dname)
            except HostUnreachable:
                source = Side(reachable=False)
        if job is not None and job.target_uri and job.target_uri != target_uri:
            job = None  # a job of an earlier attempt, to another target
        watch.job = job
        where = locate(job, source, target)
        if where.outcome is Outcome.RUNNING:
            assert src is not None and job is not None
            return await self._running(vm, intent, job, watch, src, dname)
        if where.outcome is Outcome.ARRIVED:
            return await self._finalise(vm, intent, src if source.reachable else None)
        if where.outcome is Outcome.UNKNOWN:
            # never guess: until the hosts say where the VM runs, nothing is defined, started or
            # undefined for it anywhere (the intent stands, so the VM controller keeps off too)
            self._waiting(vm, intent, where.why)
            return Result(requeue_after=POLL_UNREACHABLE_S)
        error = f"aborted: {watch.abort_reason}" if watch.abort_reason else where.why
        self._fail(name, intent, error)
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

    def _waiting(self, vm: VirtualMachine, intent: MigrationIntent, why: str) -> None:
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

        self._write_vm(vm.metadata.name, note)

    def _overdue(self, vm: VirtualMachine, intent: MigrationIntent) -> bool:
        per_gib = self.ctx.settings.get_int("migration.completion_timeout_per_gib_s")
        copied = sum(vm_view(self.ctx.cache, vm).local_disks_gib.values()) if intent.copy_storage else 0
        limit = completion_deadline_s(vm.spec.memory_mib, copied, per_gib)
        return (self.ctx.now() - intent.started_at).total_seconds() > limit

    def _abort_reason(self, vm: VirtualMachine, intent: MigrationIntent, watch: _Watch) -> str:
        ctx = self.ctx
        if vm.metadata.deletion_requested_at is not None:
            return "the VM is being deleted"
        intents = read_intents(vm.metadata.annotations)
        if intents.stop is not None or intents.restart is not None:
            return "a stop or restart of the VM was asked"
        kind, _, owner = intent.requested_by.partition("/")
        if kind == "operation":
            op = ctx.store.find(VirtualMachineOperation, owner)
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
        watch: _Watch,
        src: HypervisorDriver,
        dname: str,
    ) -> Result:
        now = self.ctx.now()
        if job.data_processed_mib > watch.processed_mib:
            watch.processed_mib = job.data_processed_mib
            watch.progress_at = now
        reason = watch.abort_reason or self._abort_reason(vm, intent, watch)
        if reason:
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
        progress_timeout = self.ctx.settings.get_int("migration.progress_timeout_s")
        return Result(requeue_after=min(POLL_S, max(0.05, progress_timeout / 4)))

    async def _finalise(
        self, vm: VirtualMachine, intent: MigrationIntent, src: HypervisorDriver | None
    ) -> Result | None:
        ctx = self.ctx
        if intent.copy_storage:
            await self._move_volumes(vm, intent, src)
        if src is not None:
            dname = domain_name(vm.metadata.uid)
            try:
                leftover = await src.get_info(dname)
                if leftover is not None and leftover.state not in LIVE:
                    await src.undefine(dname)
            except DriverError as exc:
                log.info("could not remove the source definition of %s: %s", dname, exc)

        def finish(current: VirtualMachine) -> None:
            current.metadata.annotations = write_migration(current.metadata.annotations, None)
            current.status.host = intent.target
            current.status.conditions = set_condition(
                current.status.conditions,
                VMCondition.MIGRATION,
                True,
                "Migrated",
                f"migrated from {intent.source} to {intent.target} (attempt {intent.attempt})",
                now=ctx.now(),
            )

        written = self._write_vm(vm.metadata.name, finish)
        self._watches.pop(vm.metadata.name, None)
        ctx.metrics.migration_ended(MigrationResult.COMPLETED)
        ctx.event(
            written, "Migrated", f"now on {intent.target} (from {intent.source}, attempt {intent.attempt})"
        )
        ctx.event(("Host", intent.source), "VMMigratedOut", f"VM {vm.metadata.name} left for {intent.target}")
        ctx.event(
            ("Host", intent.target), "VMMigratedIn", f"VM {vm.metadata.name} arrived from {intent.source}"
        )
        self._wake(intent)
        return None

    async def _move_volumes(
        self, vm: VirtualMachine, intent: MigrationIntent, src: HypervisorDriver | None
    ) -> None:
        """Copied local disks: point each Volume at the target's pool, then delete the source copy."""
        ctx = self.ctx
        for disk in vm.spec.disks:
            volume = ctx.store.find(Volume, disk.volume)
            pool = ctx.cache.pool(volume.spec.pool) if volume else None
            if volume is None or pool is None or pool.spec.kind is not PoolKind.LOCAL:
                continue
            driver_name = pool_driver_name(pool)
            if pool.spec.host == intent.source:
                target_pool = next(
                    (p for p in self._local_pools_of(intent.target) if pool_driver_name(p) == driver_name),
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

                ctx.mutate_spec(
                    Volume, volume.metadata.name, repoint, why="its disk was copied to the target"
                )
                ctx.event(volume, "Moved", f"copied to pool {target_pool.metadata.name} on {intent.target}")
            source_pool = next(
                (p for p in self._local_pools_of(intent.source) if pool_driver_name(p) == driver_name), None
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

    def _fail(self, name: str, intent: MigrationIntent, error: str) -> None:
        ctx = self.ctx

        def clear(current: VirtualMachine) -> None:
            current.metadata.annotations = write_migration(current.metadata.annotations, None)
            current.status.conditions = set_condition(
                current.status.conditions,
                VMCondition.MIGRATION,
                False,
                "MigrationFailed",
                f"attempt {intent.attempt} to {intent.target} failed: {error}",
                now=ctx.now(),
            )

        written = self._write_vm(name, clear)
        self._watches.pop(name, None)
        ctx.metrics.migration_ended(MigrationResult.FAILED)
        ctx.event(
            written,
            "MigrationFailed",
            f"attempt {intent.attempt} to {intent.target} failed, the VM stays on {intent.source}: {error}",
            warning=True,
        )
        self._wake(intent)

    def _wake(self, intent: MigrationIntent) -> None:
        """A slot is free: the requester and everyone who may be waiting for a slot look again."""
        for maintenance in self.ctx.cache.names(HostMaintenance.KIND):
            self.ctx.enqueue(HostMaintenance.KIND, maintenance)
        for vm in self.ctx.cache.vms():
            for op in self.ctx.cache.operations_of(vm.metadata.name):
                if (
                    op.spec.type in (OperationType.MIGRATE, OperationType.EVICT)
                    and not op.status.phase.finished
                ):
                    self.ctx.enqueue(VirtualMachineOperation.KIND, op.metadata.name)
        kind, _, owner = intent.requested_by.partition("/")
        if kind == "operation":
            self.ctx.enqueue(VirtualMachineOperation.KIND, owner)


def failure_message(vm: VirtualMachine) -> str:
    cond = get_condition(vm.status.conditions, VMCondition.MIGRATION)
    return cond.message if cond is not None and cond.status is ConditionStatus.FALSE else "migration failed"


# --------------------------------------------------------------------------- Migrate / Evict


@dataclass
class _OpProgress:
    state: str = "Pending"
    target: str | None = None
    attempts: int = 0
    tried: list[str] = field(default_factory=list)
    progress_pct: float = 0.0
    message: str = ""

    @classmethod
    def of(cls, raw: dict[str, Any]) -> _OpProgress:
        return cls(
            state=str(raw.get("state", "Pending")),
            target=raw.get("target"),
            attempts=int(raw.get("attempts", 0)),
            tried=[str(t) for t in raw.get("tried", [])],
            progress_pct=float(raw.get("progress_pct", 0.0)),
            message=str(raw.get("message", "")),
        )

    def dump(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "target": self.target,
            "attempts": self.attempts,
            "tried": list(self.tried),
            "progress_pct": self.progress_pct,
            "message": self.message,
        }


class MigrationOperations:
    """The handler of Migrate and Evict operations (registered on the operation controller).

    Migrate goes to ``spec.migrate.target_host`` when given (one attempt there), else like
    Evict to any other host, retried on another target up to ``migration.max_attempts``.
    A VM with local disks migrates with them. A superseded operation's migration is
    aborted by the coordinator.
    """

    def __init__(self, ctx: ControllerContext, coordinator: MigrationCoordinator) -> None:
        self.ctx = ctx
        self.coordinator = coordinator

    def _finish(self, op: VirtualMachineOperation, phase: OperationPhase, reason: str, message: str) -> None:
        finish_operation(self.ctx, op, phase, reason, message)

    def _save(self, op: VirtualMachineOperation, progress: _OpProgress, message: str) -> None:
        new = progress.dump()
        if op.status.progress != new or op.status.message != message:
            op.status.progress = new
            op.status.message = message
            op.status.step = progress.state
            self.ctx.write(op)

    async def __call__(self, op: VirtualMachineOperation, vm: VirtualMachine) -> Result | None:
        tag = operation_tag(op.metadata.name)
        progress = _OpProgress.of(op.status.progress)
        intent = read_migration(vm.metadata.annotations)
        if intent is not None:
            if intent.requested_by == tag:
                progress.state, progress.target = "Migrating", intent.target
                progress.attempts = max(progress.attempts, intent.attempt)
                if intent.target not in progress.tried:
                    progress.tried.append(intent.target)
                progress.progress_pct = self.coordinator.progress_pct(vm.metadata.name)
                self._save(op, progress, f"migrating to {intent.target} (attempt {intent.attempt})")
            else:
                self._save(
                    op, progress, f"waiting: another migration of the VM is under way ({intent.requested_by})"
                )
            return Result(requeue_after=POLL_S)
        explicit = op.spec.migrate.target_host if op.spec.migrate else None
        max_attempts = 1 if explicit else self.ctx.settings.get_int("migration.max_attempts")
        if progress.state == "Migrating" and progress.target:
            if vm.status.host == progress.target:
                self._finish(
                    op, OperationPhase.COMPLETED, "Migrated", f"VM {vm.metadata.name} is on {progress.target}"
                )
                return None
            error = failure_message(vm)
            if progress.attempts >= max_attempts:
                self._finish(
                    op,
                    OperationPhase.FAILED,
                    "MigrationFailed",
                    f"{error}; the VM keeps running on {vm.status.host}",
                )
                return None
            progress.state, progress.message = "Retrying", error
        if vm.status.phase not in MIGRATABLE_PHASES:
            self._finish(
                op,
                OperationPhase.FAILED,
                "NotRunning",
                f"the VM is {vm.status.phase.value}; {op.spec.type.value} needs it running",
            )
            return None
        if vm.spec.live_migration_policy is LiveMigrationPolicy.NEVER:
            self._finish(
                op, OperationPhase.FAILED, "NotMigratable", "the VM's live_migration_policy is Never"
            )
            return None
        if explicit == vm.status.host:
            self._finish(op, OperationPhase.FAILED, "AlreadyThere", f"the VM already runs on {explicit}")
            return None
        choice = self.coordinator.choose_target(vm, exclude=frozenset(progress.tried), only=explicit)
        if choice.host is None:
            detail = (
                "; ".join(f"{h}: {r}" for h, r in sorted(choice.reasons.items()))
                or "there are no other hosts"
            )
            self._finish(op, OperationPhase.FAILED, "NoTarget", f"no target host: {detail}")
            return None
        result = await self.coordinator.begin(
            vm.metadata.name, choice.host, requested_by=tag, attempt=progress.attempts + 1
        )
        if isinstance(result, Waiting):
            progress.state, progress.message = "WaitingForSlot", result.message
            self._save(op, progress, result.message)
            return Result(requeue_after=POLL_S)
        progress.attempts += 1
        progress.tried.append(choice.host)
        progress.target = choice.host
        if isinstance(result, Refused):
            if progress.attempts >= max_attempts:
                self._finish(op, OperationPhase.FAILED, "MigrationFailed", result.message)
                return None
            progress.state, progress.message = "Retrying", result.message
            self._save(op, progress, result.message)
            return Result(requeue_after=0.0)
        progress.state, progress.message, progress.progress_pct = "Migrating", "", 0.0
        self._save(op, progress, f"migrating to {choice.host} (attempt {progress.attempts})")
        return Result(requeue_after=POLL_S)
