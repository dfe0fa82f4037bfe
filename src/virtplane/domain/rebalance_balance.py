"""The balance of a cluster: each host's normalised load and the spread the rebalancer lowers.

Pure. A host's load is ``weight`` x its measured CPU use over its CPUs, plus ``1 - weight`` x
its allocation (the mean of its allocated share of vCPUs and of memory, against what it may
allocate). The spread is the population standard deviation of the loads of a cluster's
hosts; ``ClusterLoad`` keeps the sums that make it, so a move's effect costs O(1). A move's
improvement is measured on the imbalance, n x the variance (the sum of squared deviations
from the mean): what one move between two hosts changes it by does not shrink with the
cluster's size, as its change of the standard deviation does, so one minimum gain fits a
cluster of 3 hosts and one of 500.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from virtplane.domain.placement import HostView

__all__ = ["Balance", "ClusterLoad", "RebalanceSettings", "host_load", "load_coefficients", "load_of"]


def load_of(
    cpu_use: float,
    cpus: int,
    used_vcpus: int,
    allocatable_vcpus: int,
    used_memory_mib: int,
    allocatable_memory_mib: int,
    weight: float,
) -> float:
    """The normalised load of a host from its numbers (0 idle and empty; 1 busy and full)."""
    real = cpu_use / cpus if cpus > 0 else 0.0
    vcpu_share = used_vcpus / allocatable_vcpus if allocatable_vcpus > 0 else 0.0
    memory_share = used_memory_mib / allocatable_memory_mib if allocatable_memory_mib > 0 else 0.0
    return weight * real + (1.0 - weight) * (vcpu_share + memory_share) / 2


def load_coefficients(host: HostView, weight: float) -> tuple[float, float, float]:
    """What one core of CPU use, one vCPU and one MiB allocated add to ``host``'s load."""
    cpus, vcpus, mib = host.vcpus, host.allocatable_vcpus, host.allocatable_memory_mib
    return (
        weight / cpus if cpus > 0 else 0.0,
        (1.0 - weight) / 2 / vcpus if vcpus > 0 else 0.0,
        (1.0 - weight) / 2 / mib if mib > 0 else 0.0,
    )


def host_load(host: HostView, cpu_use: float, weight: float) -> float:
    return load_of(
        cpu_use,
        host.vcpus,
        host.used_vcpus,
        host.allocatable_vcpus,
        host.used_memory_mib,
        host.allocatable_memory_mib,
        weight,
    )


@dataclass(frozen=True)
class Balance:
    hosts: Mapping[str, float]
    """Host → its normalised load."""
    std: float
    """The objective: the standard deviation of the loads."""
    spread: float
    """The most loaded host's load minus the least loaded one's."""
    mean: float


class ClusterLoad:
    """The loads of a cluster's hosts and their running sums (mutable)."""

    def __init__(self, loads: Mapping[str, float]) -> None:
        self.loads = dict(loads)
        self.count = len(self.loads)
        self.total = math.fsum(self.loads.values())
        self.squares = math.fsum(v * v for v in self.loads.values())

    def set(self, host: str, load: float) -> None:
        old = self.loads[host]
        self.loads[host] = load
        self.total += load - old
        self.squares += load * load - old * old

    def std(self) -> float:
        return self._std(self.total, self.squares)

    def std_if(self, changed: Mapping[str, float]) -> float:
        """The standard deviation were the hosts in ``changed`` at those loads."""
        return self._std(*self._sums_if(changed))

    def imbalance(self) -> float:
        """The sum of the squared deviations from the mean load: n x the variance."""
        return self._imbalance(self.total, self.squares)

    def imbalance_if(self, changed: Mapping[str, float]) -> float:
        total, squares = self._sums_if(changed)
        return self._imbalance(total, squares)

    def _sums_if(self, changed: Mapping[str, float]) -> tuple[float, float]:
        total, squares = self.total, self.squares
        for host, load in changed.items():
            old = self.loads[host]
            total += load - old
            squares += load * load - old * old
        return total, squares

    def _imbalance(self, total: float, squares: float) -> float:
        return max(0.0, squares - total * total / self.count) if self.count else 0.0

    def _std(self, total: float, squares: float) -> float:
        if self.count == 0:
            return 0.0
        mean = total / self.count
        return math.sqrt(max(0.0, squares / self.count - mean * mean))

    def balance(self) -> Balance:
        # Recomputed from the loads, not the running sums: what is reported carries no drift.
        values = list(self.loads.values())
        if not values:
            return Balance({}, 0.0, 0.0, 0.0)
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        return Balance(dict(sorted(self.loads.items())), std, max(values) - min(values), mean)


@dataclass(frozen=True)
class RebalanceSettings:
    real_use_weight: float = 0.5
    """0 balances allocation only, 1 measured CPU use only."""
    min_gain: float = 0.005
    """The least a move must lower its cluster's imbalance (n x the variance of normalised load:
    moving 0.05 of load from a host 0.1 above the mean to one 0.1 below lowers it by 0.015)."""
    max_moves: int = 20
    """Per plan."""
    max_moves_per_cluster: int = 10
    max_moves_per_host: int = 2
    """Per host, counting it as source and as target."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.real_use_weight <= 1.0:
            raise ValueError(f"real_use_weight is {self.real_use_weight}, it must be within 0 to 1")
        if self.min_gain < 0:
            raise ValueError(f"min_gain is {self.min_gain}, it can't be negative")
        for name in ("max_moves", "max_moves_per_cluster", "max_moves_per_host"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} is {getattr(self, name)}, it can't be negative")
