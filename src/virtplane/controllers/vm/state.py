"""One VM reconcile's state: the VM as read, the status being computed, and memoised reads.

Steps read and change only this object (``status``, ``intents``, ``finalizers``, ``seeds``) and
the reads it memoises (``disks``, ``host``, ``domain``); nothing passes between
steps any other way. ``save`` writes the changes once, at the end; ``durable``
writes them early, at a named durable point, when a driver call follows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.lookup import host_driver, vm_boot, vm_cdrom, vm_disks, vm_nics
from virtplane.controllers.seed import delete_seeds, place_seed, seed_volume
from virtplane.controllers.vm.durable import AFTER_WRITE, CRASH_POINTS, DurablePoint
from virtplane.controllers.vm.spec import build_domain_spec
from virtplane.crashpoints import crashpoint
from virtplane.domain.base import copied
from virtplane.domain.conditions import place
from virtplane.domain.intents import Intents, read_intents, write_intents
from virtplane.domain.power import PowerDecision
from virtplane.domain.resources import Host, VirtualMachine, VirtualMachineStatus
from virtplane.domain.seeds import SeedVolume, read_seed_volumes, write_seed_volumes
from virtplane.drivers.base import DiskAttachment, DomainInfo, DomainSpec, HypervisorDriver, domain_name
from virtplane.drivers.errors import DriverError

log = logging.getLogger("virtplane.controllers.vm")


@dataclass
class HostAccess:
    """The VM's host as it was looked up: the resource, its driver (None when away), why not."""

    host: Host | None
    driver: HypervisorDriver | None
    problem: str


@dataclass
class VMState:
    ctx: ControllerContext
    vm: VirtualMachine  # as last read or written; the cache's own object: never changed here
    console_dir: str | None
    now: datetime
    status: VirtualMachineStatus = field(init=False)
    intents: Intents = field(init=False)
    finalizers: list[str] = field(init=False)
    seeds: list[SeedVolume] = field(init=False)  # the seed files written for it and not yet deleted
    info: DomainInfo | None = None  # the domain as observed this reconcile (None: not there, or not asked)
    decision: PowerDecision | None = None  # what ``decide`` chose, for ``act``
    gone: bool = False  # deleted from the store: nothing left to write
    _disks: tuple[list[DiskAttachment], str] | None = None
    _host: HostAccess | None = None
    _defined: tuple[HypervisorDriver, DomainSpec] | None = None  # define's work this reconcile

    def __post_init__(self) -> None:
        self.status = copied(self.vm.status)  # every reconcile makes one
        self.intents = read_intents(self.vm.metadata.annotations)
        self.finalizers = list(self.vm.metadata.finalizers)
        self.seeds = read_seed_volumes(self.vm.metadata.annotations)

    @property
    def name(self) -> str:
        return self.vm.metadata.name

    @property
    def domain(self) -> str:
        return domain_name(self.vm.metadata.uid)

    # ------------------------------------------------------------------ memoised reads

    def disks(self) -> tuple[list[DiskAttachment], str]:
        """The VM's disks, or why it cannot be defined (its disks, boot images or networks are not
        ready)."""
        if self._disks is None:
            cache = self.ctx.cache
            disks, problem = vm_disks(cache, self.vm)
            problem = problem or vm_boot(cache, self.vm)[1] or vm_cdrom(cache, self.vm)[1]
            self._disks = (disks, problem or vm_nics(cache, self.vm)[1])
        return self._disks

    def spec(self, seed: str | None = None) -> DomainSpec:
        cache = self.ctx.cache
        boot, nics = vm_boot(cache, self.vm)[0], vm_nics(cache, self.vm)[0]
        host = cache.host(self.vm.status.host) if self.vm.status.host else None
        cluster_cpu = host.status.cluster_cpu if host is not None else None
        cdrom = vm_cdrom(cache, self.vm)[0]
        return build_domain_spec(
            self.vm, self.disks()[0], self.console_dir, boot, nics, seed, cluster_cpu, cdrom
        )

    async def define(self, driver: HypervisorDriver) -> DomainSpec:
        """Define the domain (it is off or missing) with the VM's NoCloud seed placed on the host
        first, recorded on the VM before it is written; then delete the seeds it no longer uses.
        Once per host in a reconcile: a missing domain defined by ``observe`` is the one the start
        that follows uses (nothing it is built from changes in between)."""
        if self._defined is not None and self._defined[0] is driver:
            return self._defined[1]
        current = seed_volume(self.ctx.cache, self.vm)
        if current is not None and current not in self.seeds:
            self.seeds.append(current)
            await self.durable(DurablePoint.SEED)
        spec = self.spec(await place_seed(self.ctx.cache, self.vm, driver))
        crashpoint(CRASH_POINTS[DurablePoint.SEED])
        host = self.ctx.cache.host(self.vm.status.host) if self.vm.status.host else None
        if host is not None and host.status.accelerator is not None:
            # as the Host records it: a new connection (after a restart) may define before the
            # host controller's first look tells it
            driver.use_accelerator(host.status.accelerator.used)
        await driver.ensure_defined(spec)
        await self.delete_seeds(keep=current)
        self._defined = (driver, spec)
        return spec

    async def delete_seeds(self, keep: SeedVolume | None = None) -> bool:
        """Delete the recorded seeds but ``keep`` and strike off the ones gone (written with the
        next save); whether none is left. A seed that cannot be deleted now is tried again at
        the next define, and before the VM is deleted."""
        old = [seed for seed in self.seeds if seed != keep]
        try:
            gone = await delete_seeds(self.ctx, old)
        except DriverError as exc:
            log.warning("seed volumes of %s not deleted yet: %s", self.name, exc)
            return False
        self.seeds = [seed for seed in self.seeds if seed not in gone]
        return len(gone) == len(old)

    async def host(self) -> HostAccess:
        """The host the VM is recorded on (``status.host``), looked up once."""
        if self._host is None:
            self._host = HostAccess(*await host_driver(self.ctx, self.status.host))
        return self._host

    async def move_to(self, host_name: str) -> HostAccess:
        """Record the VM on the host placement chose (with its Scheduled condition) and look
        that host up."""
        place(self.status, host_name, "Scheduled", now=self.now)
        self._host = HostAccess(*await host_driver(self.ctx, host_name))
        return self._host

    # ------------------------------------------------------------------ writes

    def _annotations(self) -> dict[str, str]:
        return write_seed_volumes(write_intents(self.vm.metadata.annotations, self.intents), self.seeds)

    def _changed(self) -> VirtualMachine:
        """The VM to write: this state's status, intents and finalizers on the VM as read. A
        shallow copy (no deep copy of a whole VM per write): the write only dumps it, and
        what is kept afterwards is the object the store returns."""
        metadata = self.vm.metadata.model_copy(
            update={"annotations": self._annotations(), "finalizers": list(self.finalizers)}
        )
        return self.vm.model_copy(update={"metadata": metadata, "status": self.status})

    async def save(self) -> VirtualMachine:
        """Write what changed (status, intents, finalizers) with the reconcile's events; nothing
        when nothing changed (the events then wait for the next write, or the reconcile's end)."""
        if (
            self.status == self.vm.status
            and self.finalizers == self.vm.metadata.finalizers
            and self._annotations() == self.vm.metadata.annotations
        ):
            return self.vm  # nothing changed (most reconciles): no copies, no dumps
        # The store skips a write that changes nothing (comparing JSON documents), so no dumps
        # here: the comparison above already says something differs.
        self.vm = await self.ctx.write(self._changed())
        return self.vm

    async def durable(self, point: DurablePoint) -> VirtualMachine:
        """Make everything decided so far durable before the side effect that ``point`` names
        (durable.py says what each guards). The VM's ride the group commit: each is awaited
        before its driver call, and its placement's room is promised meanwhile (``Promises``)."""
        written = await self.save()
        if point in AFTER_WRITE:
            crashpoint(AFTER_WRITE[point])
        return written


__all__ = ["HostAccess", "VMState"]
