"""What the rebalance planner is given, read from the cache and the usage collection.

Hosts are the migration coordinator's target views (placement's own, with the room that
migrations in flight hold on their targets), each with its measured CPU in cores (the usage
collection's ``cpu_pct`` of its CPUs; the sum of its VMs' when it has no figure yet). VMs are
the running ones with a host, each with its measured CPU in cores (``cpu_pct`` of its vCPUs;
0 when unknown) and why it may not move: live_migration_policy Never, local disks (the
rebalancer never copies disks: a block migration is too costly for an evening-out), a
migration under way, a phase that does not migrate, or a move by a rebalance within
``rebalance.hold_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.scheduling import vm_view
from virtplane.domain.host_states import in_maintenance
from virtplane.domain.intents import read_migration
from virtplane.domain.phases import MIGRATABLE_PHASES
from virtplane.domain.rebalance import RebalanceHost, RebalanceSettings, RebalanceVM
from virtplane.domain.resources import Host, HostConnection, LiveMigrationPolicy, VirtualMachine
from virtplane.runtime.usage import UsageHistory
from virtplane.store.settings import Settings

__all__ = ["cluster_hosts", "inputs", "pause_reason", "settings_of"]


def settings_of(settings: Settings, cluster: str) -> RebalanceSettings:
    """The planner's settings for ``cluster`` (each may be overridden per cluster)."""

    def get(key: str) -> float:
        return float(settings.get(f"rebalance.{key}", cluster=cluster))

    per_plan = int(get("max_moves_per_plan"))
    return RebalanceSettings(
        real_use_weight=get("real_use_weight"),
        min_gain=get("min_gain"),
        max_moves=per_plan,
        max_moves_per_cluster=per_plan,
        max_moves_per_host=int(get("max_moves_per_host")),
    )


def cluster_hosts(hosts: list[Host], cluster: str) -> list[Host]:
    return [h for h in hosts if h.spec.cluster == cluster]


def pause_reason(hosts: list[Host]) -> str:
    """Why automatic rebalancing of these hosts' cluster waits: a host in maintenance, failed,
    fencing or silent (its VMs may be about to move by other means); "" when none is."""
    for host in sorted(hosts, key=lambda h: h.metadata.name):
        name, status = host.metadata.name, host.status
        if in_maintenance(status.resource_state):
            return f"host {name} is {status.resource_state.value}"
        if status.fence is not None:
            return f"host {name} is being fenced"
        if status.connection in (HostConnection.DOWN, HostConnection.DISCONNECTED):
            return f"host {name} is {status.connection.value}"
        if status.silent_since is not None:
            return f"host {name} stopped answering"
    return ""


def _cores(pct: float, cpus: int) -> float:
    return 0.0 if math.isnan(pct) or pct < 0 else pct / 100 * cpus


def _cannot_move(coordinator: MigrationCoordinator, vm: VirtualMachine) -> str:
    if vm.spec.live_migration_policy is LiveMigrationPolicy.NEVER:
        return "live_migration_policy Never"
    if read_migration(vm.metadata.annotations) is not None:
        return "migrating already"
    if vm.status.phase not in MIGRATABLE_PHASES:
        return f"{vm.status.phase.value}, not running"
    if coordinator.needs_storage_copy(vm):
        return "local disks: rebalancing copies no disks"
    return ""


Fleet = tuple[list[RebalanceHost], list[RebalanceVM]]
"""Every cluster's hosts and running VMs, as the planner sees them."""


def inputs(
    coordinator: MigrationCoordinator,
    usage: UsageHistory | None,
    moved_at: Mapping[str, datetime],
    now: datetime,
    hold_s: Mapping[str, float],
) -> Fleet:
    """Every host and running VM as the planner sees them now (all clusters).

    ``moved_at``: VM → when a rebalance last moved it; ``hold_s``: cluster → how long that
    keeps it where it is.
    """
    cache = coordinator.ctx.cache
    views = coordinator.target_views()
    host_cpus = {h.name: h.vcpus for h in views}
    cluster_of = {h.metadata.name: h.spec.cluster for h in cache.hosts()}
    vm_use: dict[str, float] = {}
    host_use: dict[str, float] = {}
    if usage is not None:
        for current in usage.current_vms():
            vm_use[current.vm] = current.rates.of("cpu_pct")
        for host_now in usage.current_hosts():
            host_use[host_now.host] = host_now.of("cpu_pct")
    vms: list[RebalanceVM] = []
    on_host: dict[str, float] = {}
    for vm in cache.vms():
        host = vm.status.host
        if host is None or host not in host_cpus:
            continue
        name = vm.metadata.name
        use = _cores(vm_use.get(name, math.nan), vm.spec.cpu)
        on_host[host] = on_host.get(host, 0.0) + use
        hold = timedelta(seconds=hold_s.get(cluster_of.get(host, ""), 0.0))
        recent = name in moved_at and now - moved_at[name] < hold
        vms.append(RebalanceVM(vm_view(cache, vm), use, _cannot_move(coordinator, vm), recent))
    hosts = []
    for view in views:
        measured = _cores(host_use.get(view.name, math.nan), view.vcpus)
        # The host's own figure counts what runs beside its VMs; never less than its VMs'.
        hosts.append(RebalanceHost(view, max(measured, on_host.get(view.name, 0.0))))
    return hosts, vms
