"""The host controller: connection, capacity, allocation and the Enabled/Disabled state.

The maintenance states belong to the maintenance controller; this one only moves
between Enabled and Disabled (through the host transition table) and reports. It
also records what placement reads from a host's status: its driver's capabilities
and the allocation ratios that apply to it, with the allocatable capacity they give
(the API's maintenance dry run must not call a driver, so it reads them here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import TypeVar

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.domain_survey import survey_domains
from virtplane.controllers.fencing import Fencer, liveness_thresholds, track_liveness
from virtplane.controllers.peer_cpus import PeerCPUs, digest_of
from virtplane.controllers.registration import Registration
from virtplane.controllers.watch import Watch, itself
from virtplane.domain.accelerators import choose, needs_validation
from virtplane.domain.conditions import HostCondition, remove_condition, set_condition
from virtplane.domain.host_states import HostEvent, in_maintenance, next_state
from virtplane.domain.intents import read_migration
from virtplane.domain.liveness import fence_due_in
from virtplane.domain.phases import LIVE_STATES
from virtplane.domain.placement import allocatable
from virtplane.domain.resources import (
    Accelerator,
    AcceleratorStatus,
    Allocatable,
    Allocation,
    AllocationRatios,
    Capacity,
    ClusterCPU,
    Host,
    HostConnection,
    HostStatus,
    Resource,
    Setting,
    VirtualMachine,
)
from virtplane.drivers.base import HostFacts, HypervisorDriver
from virtplane.drivers.errors import DriverError, DriverUnavailable, HostUnreachable
from virtplane.fencing.base import BmcFactory
from virtplane.reconcile.types import Request, Result
from virtplane.runtime.cache import Cache, HostShare

log = logging.getLogger("virtplane.controllers.host")
T = TypeVar("T")

HEARTBEAT_RECORD_S = 300.0
"""How old ``status.last_heartbeat`` gets before a look writes it again. As Kubernetes' node status
(nodeStatusReportFrequency, 5 minutes): the probes (``host.liveness.probe_interval_s``) watch the host, and what changes is
written at once; the record only says that it answered within the last 5 minutes. 500 idle
hosts write 1.7 times a second instead of 17 (issue 13, row 7)."""
RETRY_CONNECT_S = 5.0
FENCE_PROBE_FLOOR_S = 0.5
"""The shortest wait for a probe of a host whose fence is due: an answer within it still cancels
the fence, and a daemon that answers at all answers a facts call within it."""
ALLOCATION_BATCH_S = 0.5
"""How long a host waits to record the allocation its VMs' changes moved: a bulk stop of a
thousand VMs is a few looks per host, not one per VM. Placement reads the cache, not this
record; only people, and VMs waiting for room (``room_freed``), wait for it."""


class HostReconciler:
    def __init__(self, ctx: ControllerContext, bmc_factory: BmcFactory | None = None) -> None:
        self.ctx = ctx
        self.fencer = Fencer(ctx, bmc_factory)
        self.peer_cpus = PeerCPUs(ctx.cache)

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        host = ctx.read(Host, req.name, to_change=True)
        if host is None:
            return None
        asked_at = ctx.now()
        status = host.status.model_copy(deep=True)
        was = status.connection
        answered = False
        try:
            driver, facts = await self._probe(host, asked_at)
            if host.spec.fenced or _returning(host):
                await self._answer(self._remove_stale_domains(host, driver, fenced=host.spec.fenced))
            if not host.spec.fenced and host.metadata.name not in ctx.surveyed:
                await self._answer(survey_domains(ctx, host, driver))
            answered = True
            status.capacity = Capacity(vcpus=max(1, facts.vcpus), memory_mib=max(64, facts.memory_mib))
            status.capabilities = sorted(driver.capabilities)
            status.bridges = sorted(facts.bridges)  # which bridge networks the host has
            await self._accelerator(host, driver, status)
            await self._cluster_cpu(host, driver, status)
            status.message = ""
            status.conditions = remove_condition(status.conditions, HostCondition.DRIVER_LOADED)
            requeue = ctx.settings.get_float("host.liveness.probe_interval_s")
        except DriverError as exc:
            ctx.surveyed.discard(host.metadata.name)
            await ctx.hosts.drop(host.spec.uri)
            # the driver's errors mostly begin with the URI already: say it once
            status.message = f"cannot reach {host.spec.uri}: {str(exc).removeprefix(f'{host.spec.uri}: ')}"
            if isinstance(exc, DriverUnavailable):  # nothing is wrong with the host: say what to install
                status.message = str(exc)
                status.conditions = set_condition(
                    status.conditions,
                    HostCondition.DRIVER_LOADED,
                    False,
                    "DriverNotInstalled",
                    str(exc),
                    now=asked_at,
                )
            requeue = RETRY_CONNECT_S
        # the silence began when the unanswered question was asked; its age counts to now, after
        # the probe's wait (a fence due meanwhile is not put off by one more look)
        now = ctx.now()
        pending = track_liveness(host, status, answered, now, liveness_thresholds(ctx.settings), asked_at)
        if status.connection != was:
            ctx.event(
                host,
                f"Connection{status.connection.value}",
                status.message or f"connected to {host.spec.uri}",
                warning=status.connection is not HostConnection.UP,
            )  # the VMs on it look again (a reconnect may show domains that changed): vm.watches

        usage = ctx.cache.usage(host.metadata.name)
        status.allocated = Allocation(
            vcpus=usage.allocated_vcpus, memory_mib=usage.allocated_memory_mib, vms=usage.allocated_vms
        )
        self._allocatable(host, status)

        if not in_maintenance(status.resource_state):
            wanted = HostEvent.ENABLE if host.spec.enabled else HostEvent.DISABLE
            target = next_state(status.resource_state, wanted)
            if target != status.resource_state:
                ctx.event(host, target.value, f"host is now {target.value}")
                status.resource_state = target

        beat_due = status.last_heartbeat is None or now - status.last_heartbeat >= timedelta(
            seconds=HEARTBEAT_RECORD_S
        )
        if beat_due and status.connection is HostConnection.UP:
            status.last_heartbeat = now
        host, fence_requeue = await self.fencer.step(host, status, now)
        for later in (pending, fence_requeue):
            if later is not None:
                requeue = max(0.05, min(requeue, later))
        if status != host.status:
            host.status = status
            await ctx.write(host)
        return Result(requeue_after=requeue)

    async def _probe(self, host: Host, asked_at: datetime) -> tuple[HypervisorDriver, HostFacts]:
        """The host's driver and what it reports. A probe not answered within
        host.liveness.probe_timeout_s is a missed answer, whatever call it waits in (a stopped
        daemon holds a call on an open connection for as long as it stays stopped): the caller drops
        the driver, which lets go of the call without waiting for it. A silent host whose fence
        falls due sooner is waited for only until then (at least ``FENCE_PROBE_FLOOR_S``)."""

        async def ask() -> tuple[HypervisorDriver, HostFacts]:
            driver = await self.ctx.hosts.get(host.spec.uri)
            return driver, await driver.host_facts()

        return await self._answer(ask(), until_s=self._fence_due_in(host, asked_at))

    def _fence_due_in(self, host: Host, now: datetime) -> float | None:
        """Seconds until a silent, fenceable host's fence falls due; None when no fence is near."""
        since = host.status.silent_since
        if host.spec.fencing is None or host.spec.fenced or since is None:
            return None
        silent_for_s = (now - since).total_seconds()
        due_in = fence_due_in(silent_for_s, liveness_thresholds(self.ctx.settings))
        return max(FENCE_PROBE_FLOOR_S, due_in)

    async def _answer(self, call: Awaitable[T], longer_by_s: float = 0.0, until_s: float | None = None) -> T:
        """One call of a look at the host, bounded as the probe is (plus ``longer_by_s`` for a
        call that is long by design; at most ``until_s``): a daemon that stops after the probe
        answered must not hold the look, and liveness and fencing with it, until the reconcile's
        own time limit."""
        timeout_s = self.ctx.settings.get_float("host.liveness.probe_timeout_s") + longer_by_s
        if until_s is not None:
            timeout_s = min(timeout_s, until_s)
        try:
            async with asyncio.timeout(timeout_s):
                return await call
        except TimeoutError:
            raise HostUnreachable(f"no answer within {timeout_s:g}s") from None

    async def _accelerator(self, host: Host, driver: HypervisorDriver, status: HostStatus) -> None:
        """What the host's guests run under (``domain.accelerators``), told to its driver on every
        look (a new driver after a restart must know). The validation boot runs only when no
        verdict is recorded for the host's libvirt, QEMU and host identity."""
        settings, name, cluster = self.ctx.settings, host.metadata.name, host.spec.cluster
        offer = await self._answer(driver.accelerator_offer())
        recorded = status.accelerator
        wanted = host.spec.accelerator
        fresh = recorded is not None and recorded.validated_for == offer.fingerprint
        kvm_works = recorded.kvm_works if recorded is not None and fresh else None
        validation = recorded.validation if recorded is not None and fresh else ""
        if needs_validation(wanted, offer.kvm, offer.fingerprint, recorded):
            kernel = settings.get_str("host.accelerator.validation_kernel", cluster=cluster, host=name)
            timeout_s = settings.get_float("host.accelerator.validation_timeout_s")
            validation = await self._answer(driver.validate_kvm(kernel, timeout_s), longer_by_s=timeout_s)
            kvm_works = validation == ""
            self.ctx.event(
                host,
                "KVMValidated" if kvm_works else "KVMBroken",
                "a validation guest booted under KVM"
                if kvm_works
                else f"KVM validation failed: {validation}",
                warning=not kvm_works,
            )
        on_broken = settings.get_str("host.accelerator.kvm_broken", cluster=cluster, host=name)
        choice = choose(wanted, offer.kvm, kvm_works, on_broken)
        driver.use_accelerator(choice.used)
        offered = [Accelerator.KVM, Accelerator.TCG] if offer.kvm else [Accelerator.TCG]
        status.accelerator = AcceleratorStatus(
            offered=offered,
            used=choice.used,
            kvm_works=kvm_works,
            validated_for=offer.fingerprint if kvm_works is not None else "",
            validation=validation,
        )
        message = (
            f"{choice.message} ({validation})"
            if validation and choice.used is not Accelerator.KVM
            else choice.message
        )
        status.conditions = set_condition(
            status.conditions,
            HostCondition.ACCELERATOR,
            choice.used is not None,
            choice.reason,
            message,
            now=self.ctx.now(),
        )

    async def _cluster_cpu(self, host: Host, driver: HypervisorDriver, status: HostStatus) -> None:
        """The host's CPU, and the CPU model its cluster-mode VMs are defined with: the setting
        cpu.model of its cluster, else libvirt's baseline of every host of the cluster whose guests
        run under the same accelerator (guests migrate only between those), computed again only
        when one of those CPUs changes."""
        status.cpu = await self._answer(driver.host_cpu())
        cluster = host.spec.cluster
        named = self.ctx.settings.get_str("cpu.model", cluster=cluster)
        if named:
            status.cluster_cpu = ClusterCPU(model=named, source=f"setting cpu.model of cluster {cluster}")
            return
        used = status.accelerator.used if status.accelerator else None
        peers = self.peer_cpus.of(cluster, used)
        cpus = dict(peers.cpus)
        if status.cpu:
            cpus[host.metadata.name] = status.cpu
        if not cpus:
            status.cluster_cpu = None
            return
        mine = status.cpu.signature() if status.cpu else None
        digest = peers.digest if peers.signatures.get(host.metadata.name) == mine else digest_of(cpus)
        source = f"baseline of {', '.join(sorted(cpus))} ({digest})"
        if status.cluster_cpu is not None and status.cluster_cpu.source == source:
            return
        baseline = await self._answer(driver.baseline_cpu([cpus[name] for name in sorted(cpus)]))
        status.cluster_cpu = ClusterCPU(**baseline.model_dump(), source=source) if baseline else None

    def _allocatable(self, host: Host, status: HostStatus) -> None:
        """The allocation ratios that apply to this host (settings by host, cluster, global) and
        the capacity they give; placement and the maintenance plan count with these."""
        settings, name, cluster = self.ctx.settings, host.metadata.name, host.spec.cluster
        ratios = AllocationRatios(
            cpu=settings.get_float("host.cpu_allocation_ratio", cluster=cluster, host=name),
            memory=settings.get_float("host.memory_allocation_ratio", cluster=cluster, host=name),
        )
        status.allocation_ratios = ratios
        capacity = host.spec.capacity or status.capacity
        status.allocatable = (
            Allocatable(
                vcpus=allocatable(capacity.vcpus, ratios.cpu),
                memory_mib=allocatable(capacity.memory_mib, ratios.memory),
            )
            if capacity
            else None
        )

    async def _remove_stale_domains(self, host: Host, driver: HypervisorDriver, *, fenced: bool) -> None:
        """A host that comes back must not run VMs that were recovered elsewhere meanwhile: their
        domains are destroyed (a live one may be there: a host that was only cut off), then
        undefined. While the host is fenced, every domain of a VM recorded elsewhere goes; once
        the fence is cleared, only live copies that are sure to be stale (``_superseded``).
        Domains that are not virtplane's are not ours to touch, nor those of a VM whose
        migration is in flight (its location is the migration's to find out)."""
        for info in await driver.list_domains():
            if not info.vm_uid:
                continue
            vm_name = self.ctx.cache.vm_by_uid(info.vm_uid)
            vm = self.ctx.cache.vm(vm_name) if vm_name else None
            if vm is not None and (
                vm.status.host == host.metadata.name or read_migration(vm.metadata.annotations) is not None
            ):
                continue
            if not fenced and not (info.state in LIVE_STATES and await self._superseded(vm, info.name)):
                continue
            await driver.destroy(info.name)
            await driver.undefine(info.name)
            self.ctx.event(
                host,
                "StaleDomainRemoved",
                f"removed domain {info.name} (VM {vm_name or 'unknown'} lives elsewhere since the host was lost)",
                warning=True,
            )

    async def _superseded(self, vm: VirtualMachine | None, domain: str) -> bool:
        """A live domain of ``vm`` on a host that is not its recorded one is a stale copy when
        the VM was released from the host (recorded on none: a recovery may start it) or its
        recorded host answers that it runs there. Anything else (a host that cannot be asked, a
        domain that left it unrecorded) is the VM controller's to sort out, never guessed at."""
        from virtplane.controllers.lookup import host_driver  # lookup -> storage imports this module

        if vm is None:
            return False
        if vm.status.host is None:
            return True
        _, other, _ = await host_driver(self.ctx, vm.status.host)
        try:
            there = await other.get_info(domain) if other is not None else None
        except DriverError:
            return False
        return there is not None and there.state in LIVE_STATES


def _returning(host: Host) -> bool:
    """The host answers after a silence, or after a fence: its VMs may have been released and
    started elsewhere meanwhile, also when an admin cleared the fence before it answered again.
    Recorded on its status (the silence, Down), so the sweep is owed until a probe makes it:
    one that fails leaves the host silent."""
    return host.status.silent_since is not None or host.status.connection is HostConnection.DOWN


# --------------------------------------------------------------------------- watches


def reachability_changed(old: Resource | None, new: Resource | None) -> bool:
    """A host appeared, or its spec, state, liveness or fence changed: what can matter to its
    VMs (which show why they wait), pools and images. Allocation and heartbeat changes are the
    host's own bookkeeping and wake nobody (at 10,000 VMs this is the hot path)."""
    if not isinstance(new, Host):
        return False
    if not isinstance(old, Host):
        return True
    return _reachability(new) != _reachability(old)


def _reachability(host: Host) -> tuple[object, ...]:
    status = host.status
    # silent_since flips once when a host stops or starts answering: placement skips a silent host
    answering = status.silent_since is None
    return (host.spec, status.resource_state, status.connection, answering, status.fence)


def networks_changed(old: Resource | None, new: Resource | None) -> bool:
    """A host appeared, or the bridges it reports or its capabilities (a user network) changed:
    which networks it has."""
    if not isinstance(new, Host):
        return False
    if not isinstance(old, Host):
        return True
    return (new.status.bridges, new.status.capabilities) != (old.status.bridges, old.status.capabilities)


def room_freed(old: Resource | None, new: Resource | None) -> bool:
    """The host has more room than before: VMs waiting for a host may fit now."""
    if not (isinstance(old, Host) and isinstance(new, Host)):
        return False
    return (
        new.status.allocated.vcpus < old.status.allocated.vcpus
        or new.status.allocated.memory_mib < old.status.allocated.memory_mib
        or new.status.capacity != old.status.capacity
        or new.status.allocatable != old.status.allocatable
    )


def _every_host(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """Allocation ratios are settings by host: every host records the ones that apply now."""
    return [Request(Host.KIND, name) for name in cache.names(Host.KIND)]


def _hosts_of_vm(cache: Cache, old: Resource | None, new: Resource | None) -> list[Request]:
    """A VM that moved, or changed what it holds on its host (``HostShare``: Stopped or not, its
    size, its group): the hosts' allocations change. Starting -> Running changes nothing there."""
    if not (isinstance(old, VirtualMachine) and isinstance(new, VirtualMachine)):
        return []
    requests = []
    if old.status.host and new.status.host != old.status.host:
        requests.append(Request(Host.KIND, old.status.host))
    if new.status.host and HostShare.of(new) != HostShare.of(old):
        requests.append(Request(Host.KIND, new.status.host))
    return requests


# Not woken by its own reconcile's writes: every look ends with a verdict that says when to look
# again (the heartbeat, a retry, the next fencing step); the look after a write of the allocation
# only repeated the probe (an operation took two host looks per host, now one).
WATCHES = (
    itself(Host.KIND, after_own_writes=False),
    Watch(Setting.KIND, _every_host),
    Watch(VirtualMachine.KIND, _hosts_of_vm, batch_s=ALLOCATION_BATCH_S),
)

CONTROLLER = Registration(
    Host.KIND, lambda parts: HostReconciler(parts.ctx, parts.bmc_factory), WATCHES, workers=4
)
