"""Counters into rates: two samples of one domain (or host), taken ``elapsed`` seconds apart.

A rate exists only between two samples of the same process. A counter that went back (the
domain restarted: a new QEMU counts from zero) or a domain seen on another host since the
last sample (a migration: the target's process has counters of its own) gives no rate for
that interval (NaN, "no figure"), never a negative or a wild one. Memory is a level and is
known at every sample. A missing sample in between only lengthens ``elapsed``: the rate is
the average over the gap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from virtplane.drivers.stats import DiskCounters, DomainUsage, HostUsage

NAN = math.nan

VM_METRICS = (
    "cpu_pct",  # of the VM's vCPUs: 100 = all of them busy
    "memory_used_mib",
    "disk_read_bps",
    "disk_write_bps",
    "disk_read_iops",
    "disk_write_iops",
    "net_rx_bps",
    "net_tx_bps",
    "net_rx_pps",
    "net_tx_pps",
)
HOST_METRICS = (
    "cpu_pct",  # of the host's CPUs
    "memory_used_mib",
    "memory_total_mib",
    "load1",
    "disk_read_bps",  # disk and network: the sums of its VMs'
    "disk_write_bps",
    "net_rx_bps",
    "net_tx_bps",
)


@dataclass(frozen=True, slots=True)
class DiskRates:
    name: str
    read_bps: float
    write_bps: float
    read_iops: float
    write_iops: float


@dataclass(frozen=True, slots=True)
class VMRates:
    values: tuple[float, ...]  # in VM_METRICS' order
    disks: tuple[DiskRates, ...] = ()

    def of(self, metric: str) -> float:
        return self.values[VM_METRICS.index(metric)]


def per_second(new: int, old: int, elapsed: float) -> float:
    """The counter's rate; NaN when it went back (a reset) or no time passed."""
    if new < old or elapsed <= 0:
        return NAN
    return (new - old) / elapsed


def nansum(values: Iterable[float]) -> float:
    """The sum of the known values; NaN when none is known."""
    known = [v for v in values if not math.isnan(v)]
    return math.fsum(known) if known else NAN


def _disk_rates(new: DiskCounters, old: DiskCounters | None, elapsed: float) -> DiskRates:
    if old is None:
        return DiskRates(new.name, NAN, NAN, NAN, NAN)
    return DiskRates(
        new.name,
        per_second(new.read_bytes, old.read_bytes, elapsed),
        per_second(new.write_bytes, old.write_bytes, elapsed),
        per_second(new.read_ops, old.read_ops, elapsed),
        per_second(new.write_ops, old.write_ops, elapsed),
    )


_UNKNOWN_IO = (NAN,) * (len(VM_METRICS) - 2)


def _sums(rows: Sequence[tuple[float, ...]], width: int) -> tuple[float, ...]:
    """Column sums of the known figures; NaN for a column with none; 0 when there are no rows
    (a VM with no disk, or no NIC, moves no bytes: 0, not "unknown")."""
    if not rows:
        return (0.0,) * width
    sums = [0.0] * width
    known = [False] * width
    for row in rows:
        for i, value in enumerate(row):
            if value == value:  # not NaN
                sums[i] += value
                known[i] = True
    return tuple(total if seen else NAN for total, seen in zip(sums, known, strict=True))


def vm_rates(new: DomainUsage, old: DomainUsage | None, elapsed: float) -> VMRates:
    """``old``: the same process's sample ``elapsed`` s before, None when there is none (the
    first sample, or the one before was on another host)."""
    memory = new.memory_used_mib
    if old is None or new.cpu_time_ns < old.cpu_time_ns or elapsed <= 0:
        return VMRates((NAN, memory, *_UNKNOWN_IO))
    cpu_pct = (new.cpu_time_ns - old.cpu_time_ns) / elapsed / 1e7 / max(new.vcpus, 1)
    old_disks = {disk.name: disk for disk in old.disks}
    disks = tuple(_disk_rates(disk, old_disks.get(disk.name), elapsed) for disk in new.disks)
    old_nics = {nic.name: nic for nic in old.nics}
    nic_rates = [
        (
            per_second(nic.rx_bytes, before.rx_bytes, elapsed),
            per_second(nic.tx_bytes, before.tx_bytes, elapsed),
            per_second(nic.rx_packets, before.rx_packets, elapsed),
            per_second(nic.tx_packets, before.tx_packets, elapsed),
        )
        if (before := old_nics.get(nic.name)) is not None
        else (NAN, NAN, NAN, NAN)
        for nic in new.nics
    ]
    disk_sums = _sums([(d.read_bps, d.write_bps, d.read_iops, d.write_iops) for d in disks], 4)
    return VMRates((cpu_pct, memory, *disk_sums, *_sums(nic_rates, 4)), disks)


def host_rates(new: HostUsage, old: HostUsage | None, vms: Sequence[VMRates]) -> tuple[float, ...]:
    """In HOST_METRICS' order; disk and network are the sums of ``vms`` (its VMs' this round)."""
    cpu = NAN
    if old is not None:
        busy, total = new.cpu_busy_ns - old.cpu_busy_ns, new.cpu_total_ns - old.cpu_total_ns
        if busy >= 0 and total > 0:
            cpu = min(100.0, busy / total * 100.0)
    sums = [nansum(vm.values[i] for vm in vms) if vms else 0.0 for i in (2, 3, 6, 7)]
    load = NAN if new.load1 is None else new.load1
    return (cpu, new.memory_used_mib, new.memory_total_mib, load, *sums)


__all__ = [
    "HOST_METRICS",
    "NAN",
    "VM_METRICS",
    "DiskRates",
    "VMRates",
    "host_rates",
    "nansum",
    "per_second",
    "vm_rates",
]
