"""The composition root: builds the store, cache, host connections, controllers and the app.

Nothing is constructed at import time; ``ControlPlane.start``/``stop`` run inside the
app's lifespan (or a test's event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from virtplane.admission import Admission
from virtplane.api.app import create_app
from virtplane.api.context import ApiContext
from virtplane.controllers import attachments
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.host import HostReconciler
from virtplane.controllers.images import ImageReconciler
from virtplane.controllers.maintenance import MaintenanceReconciler, MaintenanceService, wake_on_change
from virtplane.controllers.migration import KIND as MIGRATION_KIND
from virtplane.controllers.migration import MigrationCoordinator, MigrationOperations
from virtplane.controllers.operations import OperationReconciler
from virtplane.controllers.restore import RestoreHandler
from virtplane.controllers.snapshots import SnapshotReconciler
from virtplane.controllers.storage import StoragePoolReconciler, VolumeReconciler
from virtplane.controllers.vm import VMReconciler
from virtplane.domain.resources import Host, OperationType, Resource, Secret, VirtualMachine
from virtplane.drivers.base import DomainEvent, DomainEventType, HypervisorDriver
from virtplane.fencing.base import Bmc, BmcFactory
from virtplane.fencing.sim import SimBmcs
from virtplane.metrics import FleetCollector, PlaneMetrics
from virtplane.reconcile import Controller, ControllerMetrics, Reconciler, Request, Result, resync_ticker
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.runtime.leader import LeaderElector
from virtplane.store.errors import Conflict
from virtplane.store.feed import ChangeFeed
from virtplane.store.settings import Settings
from virtplane.store.store import Store

log = logging.getLogger("virtplane")


@dataclass
class ControlPlaneOptions:
    workers: int = 8
    resync_period_s: float | None = None  # None: the controller.resync_period_s setting
    console_dir: str | None = None
    extra_routers: list[Any] = field(default_factory=list)
    # Several replicas on one PostgreSQL: only the holder of the "controllers" lease reconciles.
    # None: on for PostgreSQL, off for SQLite (one process per file).
    leader_election: bool | None = None
    replica_id: str | None = None
    lease_s: float = 15.0
    renew_every_s: float = 5.0
    feed_poll_s: float = 1.0  # how often the change feed looks for other replicas' writes
    # Wraps every reconciler (kind, reconciler) -> reconciler; tests record reconciles with it.
    wrap_reconciler: Callable[[str, Reconciler], Reconciler] | None = None


def default_driver_factory(sim: Any) -> Callable[[str], HypervisorDriver]:
    def factory(uri: str) -> HypervisorDriver:
        if uri.startswith("sim://"):
            if sim is None:
                raise ValueError("this server runs no simulator: start it with --demo or --sim")
            driver: HypervisorDriver = sim.driver(uri)
            return driver
        from virtplane.drivers.libvirt import LibvirtDriver

        return LibvirtDriver(uri)

    return factory


CONFLICT_REQUEUE_S = 0.01


def default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def one_reconcile(reconciler: Reconciler, ctx: ControllerContext | None = None) -> Reconciler:
    """What every reconcile runs in: its events go with its writes (``ctx.events_scope``), and
    a write that lost an optimistic-concurrency race is normal: its events are dropped (what
    they describe may not have happened) and the key is looked at again at once, quietly."""

    async def reconcile(request: Request) -> Result | None:
        try:
            with ctx.events_scope() if ctx is not None else contextlib.nullcontext():
                return await reconciler(request)
        except Conflict as exc:
            log.debug("%s: %s; reconciling again", request, exc)
            return Result(requeue_after=CONFLICT_REQUEUE_S)

    return reconcile


def default_bmc_factory(bmcs: SimBmcs | None) -> BmcFactory:
    """Simulated hosts have the simulated BMC; every other host's BMC speaks Redfish."""

    def make(host: Host, secret: Secret, timeout_s: float) -> Bmc:
        if bmcs is not None and host.spec.uri.startswith("sim://"):
            return bmcs.bmc(host, secret, timeout_s)
        from virtplane.fencing.redfish import redfish_bmc  # sushy loads only where a real BMC is

        return redfish_bmc(host, secret, timeout_s)

    return make


class ControlPlane:
    """Everything that runs: build with ``build_control_plane``, then ``start``/``stop``."""

    def __init__(
        self,
        store: Store,
        *,
        sim: Any = None,
        driver_factory: Callable[[str], HypervisorDriver] | None = None,
        options: ControlPlaneOptions | None = None,
    ) -> None:
        self.options = options or ControlPlaneOptions()
        self.store = store
        self.sim = sim
        self.settings = Settings(store)
        self.cache = Cache(store)
        self.feed = ChangeFeed(store, poll_interval_s=self.options.feed_poll_s)
        self.registry = CollectorRegistry()
        self.hosts = HostConnections(driver_factory or default_driver_factory(sim), self._on_driver_event)
        self.ctx = ControllerContext(
            store,
            self.cache,
            self.hosts,
            self.settings,
            enqueue=self.enqueue,
            metrics=PlaneMetrics(self.registry),
        )
        metrics = ControllerMetrics(self.registry)
        self.controllers: dict[str, Controller] = {}
        self._reconcilers: dict[str, tuple[Reconciler, int]] = {}
        self._add("VirtualMachine", VMReconciler(self.ctx, console_dir=self.options.console_dir), metrics)
        self.bmcs = SimBmcs(sim) if sim is not None else None
        self._add("Host", HostReconciler(self.ctx, default_bmc_factory(self.bmcs)), metrics, workers=4)
        self._add("StoragePool", StoragePoolReconciler(self.ctx), metrics, workers=2)
        self._add("Image", ImageReconciler(self.ctx), metrics, workers=2)
        self._add("Volume", VolumeReconciler(self.ctx), metrics, workers=4)
        self.operations = OperationReconciler(self.ctx)
        self.operations.register(OperationType.RESTORE, RestoreHandler(self.ctx))
        self._add("VirtualMachineOperation", self.operations, metrics, workers=4)
        self._add("VirtualMachineSnapshot", SnapshotReconciler(self.ctx), metrics, workers=2)
        self.migrations = MigrationCoordinator(self.ctx)
        self._add(MIGRATION_KIND, self.migrations, metrics, workers=4)
        migrate = MigrationOperations(self.ctx, self.migrations)
        self.operations.register(OperationType.MIGRATE, migrate)
        self.operations.register(OperationType.EVICT, migrate)
        self._add("HostMaintenance", MaintenanceReconciler(self.ctx, self.migrations), metrics, workers=2)
        self.cache.add_listener(self._on_cache_change)
        self.feed.subscribe(self.cache.apply)
        self.api_context = ApiContext(
            store=store,
            settings=self.settings,
            sim=sim,
            admission=Admission(store, self.cache),
            maintenance=MaintenanceService(self.ctx),
            controllers=self.controllers_status,
            catch_up=self.feed.catch_up,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._lead_tasks: list[asyncio.Task[None]] = []
        elect = self.options.leader_election
        if elect is None:
            elect = not store.is_sqlite
        self.elector = (
            LeaderElector(
                store,
                "controllers",
                self.options.replica_id or default_replica_id(),
                lease_s=self.options.lease_s,
                renew_every_s=self.options.renew_every_s,
            )
            if elect
            else None
        )
        self.registry.register(FleetCollector(self.cache, self.elector))
        self.started = False

    def _add(
        self, kind: str, reconciler: Reconciler, metrics: ControllerMetrics, workers: int | None = None
    ) -> None:
        self._metrics = metrics
        reconciler = one_reconcile(reconciler, self.ctx)
        if self.options.wrap_reconciler is not None:
            reconciler = self.options.wrap_reconciler(kind, reconciler)
        self._reconcilers[kind] = (reconciler, workers or self.options.workers)

    def _build_controllers(self) -> None:
        """Fresh controllers (a Controller runs once) around the same reconcilers."""
        self.controllers = {
            kind: Controller(kind, reconciler, workers=workers, metrics=self._metrics, timeout_s=120.0)
            for kind, (reconciler, workers) in self._reconcilers.items()
        }

    def controllers_status(self) -> dict[str, Any]:
        """For /healthz: does this process reconcile (single, leader), or follow another replica?"""
        if self.elector is None:
            return {"role": "single" if self.started else "stopped", "replica": None, "leader": None}
        leading = self.elector.is_leader and bool(self.controllers)
        return {
            "role": "leader" if leading else "follower",
            "replica": self.elector.holder_id,
            "leader": self.elector.holder_id if leading else self.elector.leader(),
        }

    # ------------------------------------------------------------------ wiring events to keys

    def enqueue(self, kind: str, name: str, delay: float = 0.0) -> None:
        controller = self.controllers.get(kind)
        if controller is not None:
            controller.enqueue(Request(kind, name), delay)

    def _on_cache_change(self, kind: str, name: str, old: Resource | None, new: Resource | None) -> None:
        self.enqueue(kind, name)
        obj = new or old
        if kind == "Volume":
            for vm_name in self.cache.vms_using_volume(name):
                self.enqueue("VirtualMachine", vm_name)
        elif kind == "StoragePool":
            for volume_name in self.cache.volumes_in_pool(name):
                self.enqueue("Volume", volume_name)
            for image in self.cache.images():
                if image.spec.pool == name:
                    self.enqueue("Image", image.metadata.name)
        elif kind == "Image":
            self._wake_image_users(name)
        elif kind == "Host":
            old_host = old if isinstance(old, Host) else None
            new_host = new if isinstance(new, Host) else None
            if new_host is None:
                return
            # Allocation and heartbeat changes are the host controller's bookkeeping; only a change
            # that can matter to VMs or pools wakes them (at 10,000 VMs this is the hot path).
            reachability = (
                new_host.spec,
                new_host.status.resource_state,
                new_host.status.connection,
                new_host.status.fence,  # the VMs show why they wait
            )
            changed = old_host is None or reachability != (
                old_host.spec,
                old_host.status.resource_state,
                old_host.status.connection,
                old_host.status.fence,
            )
            if changed:
                for pool in self.cache.pools():
                    self.enqueue("StoragePool", pool.metadata.name)
                for image in self.cache.images():
                    self.enqueue("Image", image.metadata.name)
                for vm in self.cache.vms_on_host(name):
                    self.enqueue("VirtualMachine", vm.metadata.name)
            freed = old_host is not None and (
                new_host.status.allocated.vcpus < old_host.status.allocated.vcpus
                or new_host.status.allocated.memory_mib < old_host.status.allocated.memory_mib
                or new_host.status.capacity != old_host.status.capacity
                or new_host.status.allocatable != old_host.status.allocatable
            )
            if changed or freed:  # VMs waiting for a host may fit now
                for vm_name in self.cache.unscheduled_vms():
                    self.enqueue("VirtualMachine", vm_name)
        elif kind == "Setting":
            # allocation ratios apply per host: the hosts record the new ones (and placement with them)
            self.settings.invalidate()
            for host_name in self.cache.names("Host"):
                self.enqueue("Host", host_name)
        elif kind == "VirtualMachineOperation" and obj is not None:
            self.enqueue("VirtualMachine", getattr(obj.spec, "vm", ""))  # type: ignore[attr-defined]
        elif kind == "VirtualMachine" and isinstance(obj, VirtualMachine):
            for op in self.cache.operations_of(name):
                if not op.status.phase.finished:
                    self.enqueue("VirtualMachineOperation", op.metadata.name)
            # a VM that stopped frees room: others waiting for a host look again
            if isinstance(old, VirtualMachine) and isinstance(new, VirtualMachine):
                if old.status.host and new.status.host != old.status.host:
                    self.enqueue("Host", old.status.host)
                if new.status.host and (
                    old.status.phase != new.status.phase or old.status.host != new.status.host
                ):
                    self.enqueue("Host", new.status.host)
        for wake_kind, wake_name in wake_on_change(self.cache, kind, old, new):
            self.enqueue(wake_kind, wake_name)
        for wake_kind, wake_name in attachments.wake_on_change(kind, old, new):
            self.enqueue(wake_kind, wake_name)

    def _wake_image_users(self, image: str) -> None:
        """Volumes waiting to be copied from ``image`` and VMs that boot from it."""
        for volume in self.cache.volumes():
            if volume.spec.source and volume.spec.source.image == image:
                self.enqueue("Volume", volume.metadata.name)
        for vm in self.cache.vms():
            boot = vm.spec.boot
            if boot is not None and image in (boot.kernel, boot.initrd):
                self.enqueue("VirtualMachine", vm.metadata.name)

    def _on_driver_event(self, event: DomainEvent) -> None:
        if event.type in (DomainEventType.HOST_DOWN, DomainEventType.HOST_UP):
            host = self.cache.host_by_uri(event.host_uri)
            if host is not None:
                self.enqueue("Host", host.metadata.name)
            return
        name = self.cache.vm_by_uid(event.vm_uid)
        if name is not None:
            self.enqueue("VirtualMachine", name)
            if event.type in (DomainEventType.MIGRATED, DomainEventType.MIGRATION_FAILED):
                self.enqueue(MIGRATION_KIND, name)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        revision = self.cache.load()
        self._tasks.append(asyncio.create_task(self.feed.run(revision), name="change-feed"))
        if self.elector is None:
            await self._lead()
        else:
            self._tasks.append(
                asyncio.create_task(self.elector.run(self._lead, self._step_down), name="election")
            )
        self.started = True
        log.info(
            "control plane started: %d objects cached",
            sum(len(self.cache.names(k)) for k in self._reconcilers),
        )

    async def _lead(self) -> None:
        """Run the controllers (this replica holds the lease, or is the only one)."""
        self._build_controllers()
        for controller in self.controllers.values():
            self._lead_tasks.append(
                asyncio.create_task(controller.run(), name=f"controller-{controller.name}")
            )
        period = self.options.resync_period_s or self.settings.get_float("controller.resync_period_s")
        for kind, controller in self.controllers.items():
            self._lead_tasks.append(
                asyncio.create_task(
                    resync_ticker(
                        lambda kind=kind: [Request(kind, n) for n in self.cache.names(kind)],  # type: ignore[misc]
                        controller.enqueue,
                        period,
                    ),
                    name=f"resync-{kind}",
                )
            )
        # Level-triggered start: every object is looked at once, in dependency order.
        for kind in (
            "Host",
            "StoragePool",
            "Image",
            "Volume",
            "VirtualMachine",
            "VirtualMachineSnapshot",
            "VirtualMachineOperation",
            "HostMaintenance",
        ):
            for name in self.cache.names(kind):
                self.enqueue(kind, name)
        log.info("controllers running")

    async def _step_down(self) -> None:
        """Stop reconciling, quickly: the lease may run out (reconcilers are safe to stop at any line)."""
        controllers, self.controllers = self.controllers, {}
        for controller in controllers.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(controller.stop(), 2.0)
        tasks, self._lead_tasks = self._lead_tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        log.info("controllers stopped")

    async def stop(self) -> None:
        if self.elector is not None:
            self.elector.stop()
        else:
            await self._step_down()
        for task in self._tasks:
            if task.get_name() != "election":
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 10.0)
        self._tasks.clear()
        await self._step_down()
        await self.hosts.close_all()
        self.started = False

    def app(self) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            await self.start()
            try:
                yield
            finally:
                await self.stop()

        return create_app(
            self.api_context,
            lifespan=lifespan,
            registry=self.registry,
            extra_routers=self.options.extra_routers,
        )
