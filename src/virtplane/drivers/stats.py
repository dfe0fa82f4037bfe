"""What a host reports of its own use and its running domains' use, in one call (``usage``).

Counters, never rates: a CPU time, bytes and requests since the domain's QEMU process
started (or the host booted). The collector (``runtime/usage_rates``) turns two samples into
rates; a counter that went back (a domain restarted, or came back by a migration into a new
process) is a reset, not a negative rate. Memory is a level (what the guest uses now).

Only running domains are in a sample: a stopped domain has no process and reports nothing.
Named tuples, not frozen dataclasses: 10,000 domains a round are built and read in Python,
and a tuple is made in a third of the time (bench row 17).
"""

from __future__ import annotations

from typing import NamedTuple


class DiskCounters(NamedTuple):
    name: str  # the guest's device (vda, vdb)
    read_bytes: int = 0
    write_bytes: int = 0
    read_ops: int = 0
    write_ops: int = 0


class NicCounters(NamedTuple):
    name: str  # the host side's device (vnet3), or the MAC where there is none
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    tx_packets: int = 0


class DomainUsage(NamedTuple):
    vm_uid: str
    vcpus: int
    cpu_time_ns: int  # all its vCPUs' time together
    memory_mib: int  # what it was given
    memory_used_mib: float  # what the guest uses (balloon: available - unused; else QEMU's RSS)
    disks: tuple[DiskCounters, ...] = ()
    nics: tuple[NicCounters, ...] = ()


class HostUsage(NamedTuple):
    cpus: int
    cpu_busy_ns: int  # user + kernel time, all CPUs together
    cpu_total_ns: int  # busy + idle + iowait: the host's CPU time that passed
    memory_total_mib: float
    memory_used_mib: float  # total - free - buffers - cache
    load1: float | None = None  # None where the hypervisor does not say (a remote libvirt host)


class UsageSample(NamedTuple):
    """One host's use and its running domains', taken together (one call per host)."""

    host: HostUsage
    domains: tuple[DomainUsage, ...] = ()


__all__ = ["DiskCounters", "DomainUsage", "HostUsage", "NicCounters", "UsageSample"]
