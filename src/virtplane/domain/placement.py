"""Choosing a host for a VM: a pure function over snapshots of hosts and the VM.

``choose_host`` filters the hosts, records why each rejected one was rejected
(the first rule it fails, in the order of ``_rejection``), and picks among the
rest the host with the most free memory after placement, so VMs spread out;
ties go to the lowest name, so the choice is reproducible. A caller that spreads
work rather than room (the maintenance plan, whose targets each take one
migration at a time) passes each host's ``load``: the least loaded host wins first.

Local pools: a local pool lives on one host, so ``HostView.local_pool_free_gib``
and ``VMView.local_disks_gib`` are keyed by the pool's name as the hosts know it.
Without ``copy_local_disks`` the VM's disks stay where they are, so the target
must be the host that has those pools (a start on the disks' host). With it the
disks are copied (block migration), so the target needs a pool of the same name
with room for them.

Capacity: a host offers its reported (or configured) CPUs and memory times its
allocation ratios (``allocatable``), as Nova's cpu_allocation_ratio does; a real
hypervisor runs more vCPUs than it has cores.

Migration: with ``migration=True`` the VM moves live from its current host, so that
host and the target must both have drivers that can do it (``migration_refusal``).

CPU (``cpu_refusal``): a host that takes no guests (broken KVM, refused) takes none; a
host-passthrough VM needs a KVM host, and moves live only to a host with the identical CPU;
any VM moves live only between hosts of the same accelerator (a kvm domain cannot resume
under TCG). Cluster-mode VMs use their cluster's CPU model, which every host of it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from virtplane.domain.host_states import accepts_vms
from virtplane.domain.resources import Capability, HostResourceState

__all__ = [
    "Choice",
    "HostView",
    "VMView",
    "allocatable",
    "choose_host",
    "cpu_refusal",
    "explain",
    "migration_refusal",
    "reserve",
]


REAL_USE_STEP = 0.1
"""Real CPU use within a tenth of each other is the same for placement."""


def allocatable(physical: int, ratio: float) -> int:
    """What a host may allocate of ``physical`` units at allocation ``ratio`` (rounded down)."""
    return int(physical * ratio + 1e-9)  # 3 x 1.1 is 3.3000000000000003 in floats, still 3


def _frozen_mapping(value: Mapping[str, int]) -> Mapping[str, int]:
    # A copy behind a read-only proxy: the caller's dict may change later, the view must not.
    return MappingProxyType(dict(value))


def _check_not_negative(owner: str, **values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{owner}: {name} is {value}, it can't be negative")


@dataclass(frozen=True)
class HostView:
    """What placement needs to know about one host."""

    name: str
    cluster: str
    state: HostResourceState
    connected: bool
    vcpus: int
    """The CPUs the host reports (or its configured capacity), before the allocation ratio."""
    memory_mib: int
    cpu_allocation_ratio: float = 1.0
    memory_allocation_ratio: float = 1.0
    capabilities: frozenset[Capability] = frozenset()
    """What its driver can do (live migration, block migration, ...)."""
    used_vcpus: int = 0
    used_memory_mib: int = 0
    shared_pools: frozenset[str] = frozenset()
    local_pool_free_gib: Mapping[str, int] = field(default_factory=dict)
    """Local pool name → free GiB in that pool on this host."""
    anti_affinity_groups: frozenset[str] = frozenset()
    """Anti-affinity groups that have a VM on this host."""
    networks: frozenset[str] = frozenset()
    """The Networks this host has (``domain.networks.host_lacks``)."""
    accelerator: str = ""
    """What its guests run under (kvm, tcg); "" not known yet, None in the status: no guests."""
    takes_guests: bool = True
    """False when its KVM is not usable and the admin chose refusal (``domain.accelerators``)."""
    cpu_signature: str = ""
    """Its CPU as host-passthrough guests see it (``HostCPU.signature``)."""

    def __post_init__(self) -> None:
        _check_not_negative(
            f"host {self.name}",
            vcpus=self.vcpus,
            memory_mib=self.memory_mib,
            used_vcpus=self.used_vcpus,
            used_memory_mib=self.used_memory_mib,
        )
        object.__setattr__(self, "local_pool_free_gib", _frozen_mapping(self.local_pool_free_gib))

    @property
    def allocatable_vcpus(self) -> int:
        return allocatable(self.vcpus, self.cpu_allocation_ratio)

    @property
    def allocatable_memory_mib(self) -> int:
        return allocatable(self.memory_mib, self.memory_allocation_ratio)

    @property
    def free_vcpus(self) -> int:
        return self.allocatable_vcpus - self.used_vcpus

    @property
    def free_memory_mib(self) -> int:
        return self.allocatable_memory_mib - self.used_memory_mib


@dataclass(frozen=True)
class VMView:
    """What placement needs to know about one VM."""

    name: str
    cpu: int
    memory_mib: int
    host: str | None = None
    """The host it runs on now, never a target."""
    shared_pools: frozenset[str] = frozenset()
    """Shared pools its disks use."""
    local_disks_gib: Mapping[str, int] = field(default_factory=dict)
    """Local pool name → GiB of its disks in that pool."""
    anti_affinity_group: str | None = None
    host_affinity: frozenset[str] = frozenset()
    """Hosts it may run on; empty means any."""
    cluster: str | None = None
    """The cluster it must run in; None means any."""
    networks: frozenset[str] = frozenset()
    """The Networks of its NICs: a host must have every one."""
    cpu_passthrough: bool = False
    """cpu_mode host-passthrough: KVM hosts only, and it migrates only to an identical CPU."""

    def __post_init__(self) -> None:
        _check_not_negative(f"VM {self.name}", cpu=self.cpu, memory_mib=self.memory_mib)
        _check_not_negative(f"VM {self.name}", **self.local_disks_gib)
        object.__setattr__(self, "local_disks_gib", _frozen_mapping(self.local_disks_gib))


@dataclass(frozen=True)
class Choice:
    """The chosen host, or None, and why each rejected host was rejected."""

    host: str | None
    reasons: Mapping[str, str]
    """Rejected host name → the reason; hosts that could take the VM are absent."""
    blocked: str = ""
    """Why no host was considered: the VM's own host cannot let it go ("host h1: its driver ..."), or ""."""


def migration_refusal(host: HostView, copy_local_disks: bool) -> str | None:
    """Why ``host``'s driver cannot take part in a live migration, as source or target, or None."""
    if copy_local_disks and Capability.BLOCK_MIGRATION not in host.capabilities:
        return "its driver cannot migrate local disks (no block migration)"
    if not copy_local_disks and Capability.LIVE_MIGRATION not in host.capabilities:
        return "its driver cannot live-migrate"
    return None


def cpu_refusal(vm: VMView, host: HostView, source: HostView | None) -> str | None:
    """Why ``host`` cannot run ``vm``'s CPU, or take it live from ``source``, or None."""
    if not host.takes_guests:
        return "takes no guests: its KVM is not usable (condition Accelerator)"
    if vm.cpu_passthrough and host.accelerator != "kvm":
        return f"cpu_mode host-passthrough needs KVM; it runs guests under {host.accelerator or 'an unknown accelerator'}"
    if source is None:
        return None
    if source.accelerator and host.accelerator and host.accelerator != source.accelerator:
        return (
            f"runs guests under {host.accelerator}, the VM runs under {source.accelerator} on {source.name}"
        )
    if vm.cpu_passthrough and host.cpu_signature != source.cpu_signature:
        return f"cpu_mode host-passthrough: its CPU is not identical to {source.name}'s"
    return None


def _rejection(
    vm: VMView,
    host: HostView,
    exclude: frozenset[str],
    copy_local_disks: bool,
    migration: bool,
    source: HostView | None = None,
) -> str | None:
    """Why ``host`` can't take ``vm`` (the first rule it fails), or None if it can."""
    if host.name == vm.host:
        return "current host of the VM"
    if host.name in exclude:
        return "excluded"
    if not accepts_vms(host.state):
        return "disabled" if host.state == HostResourceState.DISABLED else f"in {host.state.value}"
    if not host.connected:
        return "disconnected"
    refusal = migration_refusal(host, copy_local_disks) if migration else None
    if refusal is not None:
        return refusal
    refusal = cpu_refusal(vm, host, source if migration else None)
    if refusal is not None:
        return refusal
    if vm.cluster is not None and host.cluster != vm.cluster:
        return f"in cluster {host.cluster}, VM needs cluster {vm.cluster}"
    if vm.host_affinity and host.name not in vm.host_affinity:
        return "not in host_affinity"
    missing_pools = sorted(vm.shared_pools - host.shared_pools)
    if missing_pools:
        return f"shared pool {missing_pools[0]} not attached"
    missing_networks = sorted(vm.networks - host.networks)
    if missing_networks:
        return f"network {missing_networks[0]} is not on this host"
    if host.free_vcpus < vm.cpu:
        return f"not enough vCPUs: {host.free_vcpus} free, {vm.cpu} needed"
    if host.free_memory_mib < vm.memory_mib:
        return f"not enough memory: {host.free_memory_mib} MiB free, {vm.memory_mib} needed"
    for pool, gib in sorted(vm.local_disks_gib.items()):
        free = host.local_pool_free_gib.get(pool)
        if copy_local_disks and (free is None or free < gib):
            return f"no local pool {pool} with {gib} GiB free"
        if not copy_local_disks and free is None:
            return f"local pool {pool} is not on this host"
    if vm.anti_affinity_group is not None and vm.anti_affinity_group in host.anti_affinity_groups:
        return f"anti-affinity group {vm.anti_affinity_group} already there"
    return None


def choose_host(
    vm: VMView,
    hosts: Sequence[HostView],
    *,
    exclude: frozenset[str] = frozenset(),
    copy_local_disks: bool = False,
    migration: bool = False,
    load: Mapping[str, float] | None = None,
    real_use: Mapping[str, float] | None = None,
) -> Choice:
    """The best host for ``vm`` among ``hosts``, and the reason each other host was rejected.

    Only Enabled, connected hosts are candidates; the VM's current host and the
    ``exclude``d ones never are. Among the rest, the least ``load`` wins (hosts
    missing from it have none), then the least ``real_use`` (a host's measured CPU use,
    0 to 1, in steps of ``REAL_USE_STEP`` so that noise does not reorder hosts; given only
    when the setting asks for it: hosts missing from it count as idle), then the most free
    memory after placement, then the lowest name. With ``migration`` the VM moves live from
    its current host, which is then the source rather than a rejected candidate: when
    it (if among ``hosts``) cannot let the VM go, no host is considered and
    ``Choice.blocked`` says why.
    """
    source = None
    if migration:
        source = next((h for h in hosts if h.name == vm.host), None)
        refusal = migration_refusal(source, copy_local_disks) if source is not None else None
        if refusal is not None:
            return Choice(host=None, reasons=MappingProxyType({}), blocked=f"host {vm.host}: {refusal}")
        hosts = [h for h in hosts if h.name != vm.host]
    reasons: dict[str, str] = {}
    candidates: list[HostView] = []
    for host in hosts:
        reason = _rejection(vm, host, exclude, copy_local_disks, migration, source)
        if reason is None:
            candidates.append(host)
        else:
            reasons[host.name] = reason
    load = load or {}
    used = real_use or {}
    best = min(
        candidates,
        key=lambda h: (
            load.get(h.name, 0.0),
            round(used.get(h.name, 0.0) / REAL_USE_STEP),
            -(h.free_memory_mib - vm.memory_mib),
            h.name,
        ),
        default=None,
    )
    return Choice(host=None if best is None else best.name, reasons=MappingProxyType(reasons))


def reserve(host: HostView, vm: VMView, copy_local_disks: bool) -> HostView:
    """``host`` with ``vm``'s resources added, so later choices see them taken.

    It does not check that they fit (``choose_host`` does). With
    ``copy_local_disks`` the VM's local disks take room in the host's pools of
    the same names; a missing pool is a ``ValueError``.
    """
    local = dict(host.local_pool_free_gib)
    if copy_local_disks:
        for pool, gib in vm.local_disks_gib.items():
            if pool not in local:
                raise ValueError(f"host {host.name} has no local pool {pool} for VM {vm.name}")
            local[pool] -= gib
    groups = host.anti_affinity_groups
    if vm.anti_affinity_group is not None:
        groups = groups | {vm.anti_affinity_group}
    return replace(
        host,
        used_vcpus=host.used_vcpus + vm.cpu,
        used_memory_mib=host.used_memory_mib + vm.memory_mib,
        local_pool_free_gib=local,
        anti_affinity_groups=groups,
    )


def why_no_target(choice: Choice) -> str:
    """Why a VM that must move has nowhere to go (a maintenance plan, a drain, a migration)."""
    if choice.blocked:
        return f"cannot leave {choice.blocked}"
    if not choice.reasons:
        return "no target host: there are no other hosts"
    details = "; ".join(f"{name}: {reason}" for name, reason in sorted(choice.reasons.items()))
    return f"no target host: {details}"


def explain(choice: Choice) -> str:
    """One line: the chosen host, or why no host fits."""
    if choice.blocked:
        return f"no host: the VM cannot leave {choice.blocked}"
    if choice.host is not None:
        rejected = len(choice.reasons)
        if not rejected:
            return f"host {choice.host}"
        return f"host {choice.host} ({rejected} other host{'s' if rejected > 1 else ''} rejected)"
    if not choice.reasons:
        return "no host: there are no hosts"
    return "no host: " + "; ".join(f"{name}: {reason}" for name, reason in sorted(choice.reasons.items()))
