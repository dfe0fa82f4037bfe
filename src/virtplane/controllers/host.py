"""The host controller: connection, capacity, allocation and the Enabled/Disabled state.

The maintenance states belong to the maintenance controller; this one only moves
between Enabled and Disabled (through the host transition table) and reports. It
also records what placement reads from a host's status: its driver's capabilities
and the allocation ratios that apply to it, with the allocatable capacity they give
(the API's maintenance dry run must not call a driver, so it reads them here).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.fencing import Fencer, liveness_thresholds, track_liveness
from virtplane.domain.conditions import HostCondition, remove_condition, set_condition
from virtplane.domain.host_states import HostEvent, in_maintenance, next_state
from virtplane.domain.placement import allocatable
from virtplane.domain.resources import (
    Allocatable,
    Allocation,
    AllocationRatios,
    Capacity,
    Host,
    HostConnection,
    HostStatus,
    VMPhase,
)
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import DriverError, DriverUnavailable
from virtplane.fencing.base import BmcFactory
from virtplane.reconcile.types import Request, Result

log = logging.getLogger("virtplane.controllers.host")

HEARTBEAT_S = 30.0
RETRY_CONNECT_S = 5.0


class HostReconciler:
    def __init__(self, ctx: ControllerContext, bmc_factory: BmcFactory | None = None) -> None:
        self.ctx = ctx
        self.fencer = Fencer(ctx, bmc_factory)

    async def __call__(self, req: Request) -> Result | None:
        ctx = self.ctx
        host = ctx.store.find(Host, req.name)
        if host is None:
            return None
        now = ctx.now()
        status = host.status.model_copy(deep=True)
        was = status.connection
        answered = False
        try:
            driver = await ctx.hosts.get(host.spec.uri)
            facts = await driver.host_facts()
            if host.spec.fenced:
                await self._remove_stale_domains(host, driver)
            answered = True
            status.capacity = Capacity(vcpus=max(1, facts.vcpus), memory_mib=max(64, facts.memory_mib))
            status.capabilities = sorted(driver.capabilities)
            status.message = ""
            status.conditions = remove_condition(status.conditions, HostCondition.DRIVER_LOADED)
            requeue = HEARTBEAT_S
        except DriverError as exc:
            await ctx.hosts.drop(host.spec.uri)
            status.message = f"cannot reach {host.spec.uri}: {exc}"
            if isinstance(exc, DriverUnavailable):  # nothing is wrong with the host: say what to install
                status.message = str(exc)
                status.conditions = set_condition(
                    status.conditions,
                    HostCondition.DRIVER_LOADED,
                    False,
                    "DriverNotInstalled",
                    str(exc),
                    now=now,
                )
            requeue = RETRY_CONNECT_S
        pending = track_liveness(host, status, answered, now, liveness_thresholds(ctx.settings))
        if status.connection != was:
            ctx.event(
                host,
                f"Connection{status.connection.value}",
                status.message or f"connected to {host.spec.uri}",
                warning=status.connection is not HostConnection.UP,
            )
            # VMs on the host look again: a reconnect may show domains that changed meanwhile
            for vm in ctx.cache.vms_on_host(host.metadata.name):
                ctx.requeue_vm(vm.metadata.name)

        used_cpu = used_mem = count = 0
        for vm in ctx.cache.vms_on_host(host.metadata.name):
            if vm.status.phase is VMPhase.STOPPED:
                continue
            used_cpu += vm.spec.cpu
            used_mem += vm.spec.memory_mib
            count += 1
        status.allocated = Allocation(vcpus=used_cpu, memory_mib=used_mem, vms=count)
        self._allocatable(host, status)

        if not in_maintenance(status.resource_state):
            wanted = HostEvent.ENABLE if host.spec.enabled else HostEvent.DISABLE
            target = next_state(status.resource_state, wanted)
            if target != status.resource_state:
                ctx.event(host, target.value, f"host is now {target.value}")
                status.resource_state = target

        beat_due = status.last_heartbeat is None or now - status.last_heartbeat >= timedelta(
            seconds=HEARTBEAT_S
        )
        if beat_due and status.connection is HostConnection.UP:
            status.last_heartbeat = now
        host, fence_requeue = await self.fencer.step(host, status, now)
        for later in (pending, fence_requeue):
            if later is not None:
                requeue = max(0.05, min(requeue, later))
        if status != host.status:
            host.status = status
            ctx.write(host)
        return Result(requeue_after=requeue)

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

    async def _remove_stale_domains(self, host: Host, driver: HypervisorDriver) -> None:
        """A fenced host that comes back must not run VMs that were recovered elsewhere meanwhile."""
        for info in await driver.list_domains():
            vm_name = self.ctx.cache.vm_by_uid(info.vm_uid)
            vm = self.ctx.cache.vm(vm_name) if vm_name else None
            if vm is not None and vm.status.host == host.metadata.name:
                continue
            await driver.destroy(info.name)
            await driver.undefine(info.name)
            self.ctx.event(
                host,
                "StaleDomainRemoved",
                f"removed domain {info.name} (VM {vm_name or 'unknown'} lives elsewhere since the fence)",
                warning=True,
            )
