"""Turns stored hosts, pools and VMs into the placement views of the pure domain layer."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from virtplane.domain.networks import host_lacks
from virtplane.domain.placement import Choice, HostView, VMView, choose_host, reserve
from virtplane.domain.placement_rules import Rule, count_members, rule_of, rules_for
from virtplane.domain.pools import pool_driver_name
from virtplane.domain.resources import (
    Capability,
    CpuMode,
    Host,
    HostConnection,
    PlacementRule,
    PoolKind,
    StoragePool,
    VirtualMachine,
)
from virtplane.runtime.cache import Cache

# Placement reserves by writing status.host first; which VMs hold room is PLACED_PHASES, as the
# cache tallies them per host (``Cache.usage``), and ``Promises`` until that write lands.
GIB = 1


class Promises:
    """Room that starts' placements took on hosts before their writes landed.

    The cache counts a VM on its host once the write naming the host is committed, and a
    write awaits a turn of the loop (``GroupCommit``); the VM reconciles that run meanwhile
    would otherwise all see the same free room (nine VMs on a host with room for eight).
    A promise counts until the cache holds the VM on that host; its reconcile lets go of it
    at its end, written or not.
    """

    def __init__(self) -> None:
        self._by_vm: dict[str, tuple[str, VMView]] = {}

    def take(self, host: str, vm: VMView) -> None:
        self._by_vm[vm.name] = (host, vm)

    def release(self, vm: str) -> None:
        self._by_vm.pop(vm, None)

    def __len__(self) -> int:
        return len(self._by_vm)

    def pending(self, cache: Cache) -> list[tuple[str, VMView]]:
        """The promises whose VM the cache does not hold on the promised host yet."""
        result = []
        for name, (host, view) in self._by_vm.items():
            held = cache.vm(name)
            if held is None or held.status.host != host:
                result.append((host, view))
        return result


def pool_hosts(cache: Cache, pool: StoragePool) -> set[str]:
    """Hosts that see ``pool``."""
    if pool.spec.kind is PoolKind.LOCAL:
        return {pool.spec.host} if pool.spec.host else set()
    hosts = set(pool.spec.hosts)
    if pool.spec.cluster:
        hosts |= {h.metadata.name for h in cache.hosts() if h.spec.cluster == pool.spec.cluster}
    return hosts


def placement_rules(cache: Cache) -> tuple[Rule, ...]:
    """The PlacementRules, parsed (their selectors were checked when they were written)."""
    return tuple(rule_of(r) for r in cache.objects(PlacementRule))


def vm_view(cache: Cache, vm: VirtualMachine) -> VMView:
    shared: set[str] = set()
    local: dict[str, int] = {}
    affinity = set(vm.spec.placement.host_affinity)
    for disk in vm.spec.disks:
        volume = cache.volume(disk.volume)
        pool = cache.pool(volume.spec.pool) if volume else None
        if volume is None or pool is None:
            continue
        if pool.spec.kind is PoolKind.SHARED:
            shared.add(pool.metadata.name)
        else:
            key = pool_driver_name(pool)
            local[key] = local.get(key, 0) + volume.spec.size_gib
    return VMView(
        name=vm.metadata.name,
        cpu=vm.spec.cpu,
        memory_mib=vm.spec.memory_mib,
        host=vm.status.host,
        shared_pools=frozenset(shared),
        local_disks_gib=local,
        anti_affinity_group=vm.spec.placement.anti_affinity_group,
        host_affinity=frozenset(affinity),
        networks=frozenset(nic.network for nic in vm.spec.nics),
        cpu_passthrough=vm.spec.cpu_mode is CpuMode.HOST_PASSTHROUGH,
        rules=rules_for(vm.metadata.labels, placement_rules(cache)),
    )


def local_pool_hosts(cache: Cache, vm: VirtualMachine) -> set[str] | None:
    """The hosts whose local pools hold the VM's local disks (None when it has none)."""
    hosts: set[str] | None = None
    for disk in vm.spec.disks:
        volume = cache.volume(disk.volume)
        pool = cache.pool(volume.spec.pool) if volume else None
        if pool is not None and pool.spec.kind is PoolKind.LOCAL and pool.spec.host:
            hosts = {pool.spec.host} if hosts is None else hosts & {pool.spec.host}
    return hosts


def host_networks(cache: Cache, host: Host) -> frozenset[str]:
    """The Networks ``host`` has, from what it reported (its bridges, its driver's capabilities)."""
    bridges = frozenset(host.status.bridges)
    user = Capability.USER_NETWORK in host.status.capabilities
    name, cluster = host.metadata.name, host.spec.cluster
    return frozenset(
        n.metadata.name for n in cache.networks() if host_lacks(n.spec, name, cluster, bridges, user) is None
    )


def host_views(cache: Cache, promised: Promises, rules: tuple[Rule, ...] | None = None) -> list[HostView]:
    """Every host as placement sees it: the room its VMs hold, and the room ``promised``.

    Each host's count of VM-VM rule members is taken for ``rules`` (those of the VM placed:
    a VM under none walks no VMs), or for every rule (None: a plan for many VMs)."""
    pools = cache.pools()
    shared_by_host: dict[str, set[str]] = defaultdict(set)
    local_by_host: dict[str, dict[str, int]] = defaultdict(dict)
    for pool in pools:  # each pool's hosts once (a cluster's shared pool: every host of it)
        for name in pool_hosts(cache, pool):
            if pool.spec.kind is PoolKind.SHARED:
                shared_by_host[name].add(pool.metadata.name)
            else:
                free = pool.spec.capacity_gib - cache.pool_used_gib(pool.metadata.name)
                local_by_host[name][pool_driver_name(pool)] = free
    placed = ((vm.status.host, vm.metadata.labels) for vm in cache.vms() if vm.status.host)
    members = count_members(placed, placement_rules(cache) if rules is None else rules)
    views = []
    for host in cache.hosts():
        name = host.metadata.name
        capacity = host.spec.capacity or host.status.capacity
        usage = cache.usage(name)
        shared, local = shared_by_host.get(name, set()), local_by_host.get(name, {})
        # Ratios as the host controller recorded them; none yet (never reconciled): no overcommit.
        ratios = host.status.allocation_ratios
        accel = host.status.accelerator
        views.append(
            HostView(
                name=name,
                cluster=host.spec.cluster,
                state=host.status.resource_state,
                # a host that stopped answering takes no new VM, even before it counts as Disconnected
                connected=host.status.connection is HostConnection.UP and host.status.silent_since is None,
                vcpus=capacity.vcpus if capacity else 0,
                memory_mib=capacity.memory_mib if capacity else 0,
                cpu_allocation_ratio=ratios.cpu if ratios else 1.0,
                memory_allocation_ratio=ratios.memory if ratios else 1.0,
                capabilities=frozenset(host.status.capabilities),
                used_vcpus=usage.placed_vcpus,
                used_memory_mib=usage.placed_memory_mib,
                shared_pools=frozenset(shared),
                local_pool_free_gib=local,
                anti_affinity_groups=usage.anti_affinity_groups(),
                networks=host_networks(cache, host),
                accelerator=accel.used.value if accel and accel.used else "",
                takes_guests=accel is None or accel.used is not None,
                cpu_signature=host.status.cpu.signature() if host.status.cpu else "",
                labels=host.metadata.labels,
                rule_members=members.get(name, {}),
            )
        )
    pending = promised.pending(cache)
    if not pending:  # nearly always: no placement in flight
        return views
    by_name = {view.name: view for view in views}
    for host_name, vm in pending:
        if host_name in by_name:  # a start's disks are in the host's pools already: no copy
            by_name[host_name] = reserve(by_name[host_name], vm, copy_local_disks=False)
    return list(by_name.values())


def start_choice(
    cache: Cache,
    vm: VirtualMachine,
    promised: Promises,
    real_use: Mapping[str, float] | None,
    *,
    explain: bool = False,
) -> tuple[Choice, VMView]:
    """Where ``vm`` would start now (a start, a restart elsewhere, a recovery): the engine's
    choice over every host, and the view it judged (the one a promise holds)."""
    view = vm_view(cache, vm)
    pinned = local_pool_hosts(cache, vm)
    if pinned is not None:  # its local disks stay: only their host, within its host_affinity
        affinity = pinned if not view.host_affinity else pinned & view.host_affinity
        view = replace(view, host_affinity=frozenset(affinity) or frozenset({"-"}))
    hosts = host_views(cache, promised, view.rules)
    if vm.status.host is not None and view.rules:  # not its own fellow where it was (a stopped VM)
        hosts = [_without_member(h, view) if h.name == vm.status.host else h for h in hosts]
    choice = choose_host(replace(view, host=None), hosts, real_use=real_use, explain=explain)
    return choice, view


def _without_member(host: HostView, vm: VMView) -> HostView:
    """``host`` with ``vm`` no longer counted among its rules' VMs there."""
    members = dict(host.rule_members)
    for rule in vm.rules:
        if members.get(rule.name, 0) > 0:
            members[rule.name] -= 1
    return replace(host, rule_members=members)
