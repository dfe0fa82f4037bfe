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
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry

from virtplane.api.app import TokenCacheCollector, create_app
from virtplane.api.context import ApiContext, ControllersRole
from virtplane.controllers.context import ControllerContext
from virtplane.controllers.installed import CONTROLLERS, OPERATION_HANDLERS
from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.rebalance import Rebalancer
from virtplane.controllers.registration import MIGRATION_KIND, Parts
from virtplane.controllers.watch import Watch, reconciling, requests_for
from virtplane.domain.resources import (
    Host,
    Resource,
    Secret,
    Setting,
    VirtualMachine,
    VirtualMachineOperation,
)
from virtplane.drivers.base import DomainEvent, DomainEventType, HypervisorDriver
from virtplane.fencing.base import Bmc, BmcFactory
from virtplane.fencing.sim import SimBmcs
from virtplane.metrics import BackupCollector, FleetCollector, PlaneMetrics
from virtplane.reconcile import Controller, ControllerMetrics, Reconciler, Request, Result, resync_ticker
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.runtime.leader import LeaderElector
from virtplane.runtime.other_writers import OtherWriters
from virtplane.runtime.retention import Retention
from virtplane.runtime.usage import INTERVAL_S as USAGE_INTERVAL_S
from virtplane.runtime.usage import UsageCollector, UsageHistory
from virtplane.services.admission import Admission
from virtplane.services.console import ConsoleService
from virtplane.services.display import DisplayService
from virtplane.services.image_upload import ImageUploads
from virtplane.services.maintenance import MaintenanceService
from virtplane.services.placement import PlacementService
from virtplane.services.rebalance import RebalanceService
from virtplane.store.errors import Conflict
from virtplane.store.feed import ChangeFeed
from virtplane.store.settings import Settings
from virtplane.store.store import Store
from virtplane.usage_metrics import UsageMetrics

if TYPE_CHECKING:
    from virtplane.drivers.sim import SimCloud

log = logging.getLogger("virtplane")


Role = Literal["all", "api", "controllers"]


@dataclass
class ControlPlaneOptions:
    workers: int = 64
    """Concurrent reconciles of a controller that names no count of its own (the VM
    controller): how many VMs move at once. Their writes share commits (``GroupCommit``), so
    more of them is fewer commits: a cold start of 10,000 VMs takes 3-5 writes a commit with
    8, about 25 with 64, and less server CPU a VM (docs/benchmarks.md). A host's own calls
    stay bounded by its driver (libvirt: four threads a connection)."""
    resync_period_s: float | None = None  # None: the controller.resync_period_s setting
    console_dir: str | None = None
    extra_routers: list[APIRouter] = field(default_factory=list)
    # Several replicas on one PostgreSQL: only the holder of the "controllers" lease reconciles.
    # None: on for PostgreSQL, off for SQLite (one process per file).
    leader_election: bool | None = None
    replica_id: str | None = None
    lease_s: float = 15.0
    renew_every_s: float = 5.0
    feed_poll_s: float = 1.0  # how often the change feed looks for other replicas' writes
    # Wraps every reconciler (kind, reconciler) -> reconciler; tests record reconciles with it.
    wrap_reconciler: Callable[[str, Reconciler], Reconciler] | None = None
    usage_interval_s: float = USAGE_INTERVAL_S  # how often the leader collects usage (runtime/usage)
    role: Role = "all"
    """all: everything; api: the feed and the API, never a controller; controllers: the
    controllers, leader-elected (also on SQLite), beside API processes (``serve --role``)."""
    other_writers_poll_s: float | None = None
    """Look for other processes' commits this often (``runtime.other_writers``); None: the feed's poll."""


def default_driver_factory(sim: SimCloud | None) -> Callable[[str], HypervisorDriver]:
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
        token = reconciling.set(request)
        try:
            async with ctx.events_scope() if ctx is not None else contextlib.nullcontext():
                return await reconciler(request)
        except Conflict as exc:
            log.debug("%s: %s; reconciling again", request, exc)
            return Result(requeue_after=CONFLICT_REQUEUE_S)
        finally:
            reconciling.reset(token)

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
        sim: SimCloud | None = None,
        driver_factory: Callable[[str], HypervisorDriver] | None = None,
        options: ControlPlaneOptions | None = None,
    ) -> None:
        self.options = options or ControlPlaneOptions()
        self.store = store
        self.sim = sim
        self.settings = Settings(store)
        self.cache = Cache(store)
        self.feed = ChangeFeed(store, poll_interval_s=self.options.feed_poll_s, resync=self.cache.resync)
        self.retention = Retention(store, self.settings, keep_after=lambda: self.feed.revision)
        self.usage = UsageHistory(self.options.usage_interval_s)
        self.registry = CollectorRegistry()
        self._tokens_collector: TokenCacheCollector | None = None
        self.hosts = HostConnections(driver_factory or default_driver_factory(sim), self._on_driver_event)
        self.ctx = ControllerContext(
            store,
            self.cache,
            self.hosts,
            self.settings,
            enqueue=self.enqueue,
            metrics=PlaneMetrics(self.registry),
        )
        self._metrics = ControllerMetrics(self.registry)
        self.controllers: dict[str, Controller] = {}
        self._reconcilers: dict[str, tuple[Reconciler, int]] = {}
        self.watches: list[Watch] = []
        """Every controller's watches: who wakes whom on a change of the cache."""
        self.bmcs = SimBmcs(sim) if sim is not None else None
        self.migrations = MigrationCoordinator(self.ctx)
        parts = Parts(
            self.ctx,
            self.migrations,
            default_bmc_factory(self.bmcs),
            operation_handlers=OPERATION_HANDLERS,
            console_dir=self.options.console_dir,
        )
        built: dict[str, Reconciler] = {}
        for registered in CONTROLLERS:
            built[registered.kind] = reconciler = registered.reconciler(parts)
            self._add(registered.kind, reconciler, registered.workers, watches=registered.watches)
        for handled in OPERATION_HANDLERS:
            self.watches += handled.watches
        self.operations = built[VirtualMachineOperation.KIND]
        """The operation controller's reconciler, unwrapped (tests call it directly)."""
        self.cache.add_listener(self._on_cache_change)
        self.feed.subscribe(self.cache.apply)
        self.rebalancer = Rebalancer(self.migrations, self.usage, registry=self.registry)
        self.api_context = ApiContext(
            store=store,
            settings=self.settings,
            sim=sim,
            admission=Admission(store, self.cache),
            maintenance=MaintenanceService(self.ctx),
            placement=PlacementService(self.migrations),
            rebalance=RebalanceService(self.rebalancer),
            consoles=ConsoleService(self.ctx),
            images=ImageUploads(self.ctx),
            displays=DisplayService(self.ctx),
            controllers=self.controllers_status,
            catch_up=self.feed.catch_up,
            written=self.cache.put,
            usage=self.usage,
        )
        self.usage_collector = UsageCollector(self.cache, self.hosts, self.usage)
        self.ctx.real_use = self._real_use
        self._tasks: list[asyncio.Task[None]] = []
        self._lead_tasks: list[asyncio.Task[None]] = []
        elect = self.options.leader_election
        if elect is None:
            elect = self.options.role == "controllers" or not store.is_sqlite
        elect = elect and self.options.role != "api"
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
        self.registry.register(BackupCollector(self.cache))
        self.usage_metrics = UsageMetrics(self.usage)
        self.started = False

    def _add(
        self, kind: str, reconciler: Reconciler, workers: int | None, *, watches: Sequence[Watch]
    ) -> None:
        self.watches += watches
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

    def _real_use(self) -> dict[str, float]:
        """Each host's measured CPU use (0 to 1) for placement, when ``placement.real_use`` is on."""
        if not self.settings.get_bool("placement.real_use"):
            return {}
        return {
            now.host: now.of("cpu_pct") / 100 for now in self.usage.current_hosts() if now.of("cpu_pct") >= 0
        }

    def controllers_status(self) -> ControllersRole:
        """For /healthz: does this process reconcile (single, leader), or follow another replica?"""
        if self.options.role == "api" or self.elector is None:
            role = "single" if self.options.role == "all" else self.options.role
            return {"role": role if self.started else "stopped", "replica": None, "leader": None}
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
        if kind == Setting.KIND:
            self.settings.invalidate()  # before anyone reads a setting again
        requests = requests_for(self.watches, self.cache, kind, old, new)
        # An operation answers a client that waits for it: it looks first, the controllers'
        # own bookkeeping after the change (a host's allocation, a VM's phase) can wait.
        for request in sorted(requests, key=lambda request: request.kind != VirtualMachineOperation.KIND):
            self.enqueue(request.kind, request.name, requests[request])

    def _on_driver_event(self, event: DomainEvent) -> None:
        if event.type in (DomainEventType.HOST_DOWN, DomainEventType.HOST_UP):
            down_or_up = self.cache.host_by_uri(event.host_uri)
            if down_or_up is not None:
                self.enqueue(Host.KIND, down_or_up.metadata.name)
            return
        name = self.cache.vm_by_uid(event.vm_uid)
        if name is not None:
            self.enqueue(VirtualMachine.KIND, name)
            if event.type in (DomainEventType.MIGRATED, DomainEventType.MIGRATION_FAILED):
                self.enqueue(MIGRATION_KIND, name)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        revision = self.cache.load()
        self._tasks.append(asyncio.create_task(self.feed.run(revision), name="change-feed"))
        if self.options.other_writers_poll_s is not None:
            others = OtherWriters(self.store, self.options.other_writers_poll_s)
            self._tasks.append(asyncio.create_task(others.run(), name="other-writers"))
        if self.options.role == "api":
            pass  # the controllers run in another process
        elif self.elector is None:
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
        max_per_s = self.settings.get_float("controller.resync_max_per_s")
        for kind, controller in self.controllers.items():
            self._lead_tasks.append(
                asyncio.create_task(
                    resync_ticker(
                        lambda kind=kind: [Request(kind, n) for n in self.cache.names(kind)],  # type: ignore[misc]
                        controller.enqueue_resync,
                        period,
                        max_per_s=max_per_s,
                    ),
                    name=f"resync-{kind}",
                )
            )
        self._lead_tasks.append(asyncio.create_task(self.retention.run(), name="retention"))
        self._lead_tasks.append(asyncio.create_task(self.usage_collector.run(), name="usage"))
        self._lead_tasks.append(asyncio.create_task(self.rebalancer.run(), name="rebalance"))
        # Level-triggered start: every object is looked at once, in dependency order, after
        # whatever events arrive meanwhile (a VM that booted is seen Running before the rest start).
        for registered in CONTROLLERS:
            listed = self.controllers.get(registered.kind)
            if listed is None or not registered.looked_at_on_start:
                continue
            for name in self.cache.names(registered.kind):
                listed.enqueue_resync(Request(registered.kind, name))
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

    def app(self, *, health_only: bool = False) -> FastAPI:
        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            await self.start()
            try:
                yield
            finally:
                await self.stop()

        app = create_app(
            self.api_context,
            lifespan=lifespan,
            registry=self.registry,
            extra_routers=self.options.extra_routers,
            more_metrics=self.usage_metrics.text,
            health_only=health_only,
        )
        if self._tokens_collector is not None:  # an app built again: its cache is the one shown
            self.registry.unregister(self._tokens_collector)
        self._tokens_collector = TokenCacheCollector(app.state.tokens)
        self.registry.register(self._tokens_collector)
        return app
