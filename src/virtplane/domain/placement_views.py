"""What placement knows of a host and of a VM: frozen snapshots (``domain.placement`` decides).

Capacity: a host offers its reported (or configured) CPUs and memory times its allocation
ratios (``allocatable``), as Nova's cpu_allocation_ratio does; a real hypervisor runs more
vCPUs than it has cores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TypeVar

from virtplane.domain.placement_rules import Rule
from virtplane.domain.resources import Capability, HostResourceState

__all__ = ["HostView", "VMView", "allocatable"]

T = TypeVar("T")


def allocatable(physical: int, ratio: float) -> int:
    """What a host may allocate of ``physical`` units at allocation ``ratio`` (rounded down)."""
    return int(physical * ratio + 1e-9)  # 3 x 1.1 is 3.3000000000000003 in floats, still 3


def _frozen_mapping(value: Mapping[str, T]) -> Mapping[str, T]:
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
    labels: Mapping[str, str] = field(default_factory=dict)
    """The host's labels, for VM-host rules."""
    rule_members: Mapping[str, int] = field(default_factory=dict)
    """VM-VM rule name → how many of the rule's VMs the host holds (``domain.placement_rules``)."""

    def __post_init__(self) -> None:
        _check_not_negative(
            f"host {self.name}",
            vcpus=self.vcpus,
            memory_mib=self.memory_mib,
            used_vcpus=self.used_vcpus,
            used_memory_mib=self.used_memory_mib,
        )
        object.__setattr__(self, "local_pool_free_gib", _frozen_mapping(self.local_pool_free_gib))
        object.__setattr__(self, "labels", _frozen_mapping(self.labels))
        object.__setattr__(self, "rule_members", _frozen_mapping(self.rule_members))

    @cached_property  # a frozen view: computed once (placement reads it for every host, every VM)
    def allocatable_vcpus(self) -> int:
        return allocatable(self.vcpus, self.cpu_allocation_ratio)

    @cached_property
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
    rules: tuple[Rule, ...] = ()
    """The placement rules that select it (``placement_rules.rules_for`` its labels)."""

    def __post_init__(self) -> None:
        _check_not_negative(f"VM {self.name}", cpu=self.cpu, memory_mib=self.memory_mib)
        _check_not_negative(f"VM {self.name}", **self.local_disks_gib)
        object.__setattr__(self, "local_disks_gib", _frozen_mapping(self.local_disks_gib))
