"""A libvirt host's use in one round of calls: ``getAllDomainStats`` for every running domain
(CPU time, balloon and RSS, block and interface counters, vCPUs), ``getCPUStats`` and
``getMemoryStats`` for the host itself.

libvirt reports no load average. A local connection (``qemu:///system``: the daemon is on
this machine) reads the kernel's own (``os.getloadavg``); a remote host's is left out (None)
rather than guessed from its CPU time, which the CPU figure already says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from virtplane.drivers.base import vm_uid_of
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.stats import DiskCounters, DomainUsage, HostUsage, NicCounters, UsageSample

KIB_PER_MIB = 1024


def _int(stats: Mapping[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    return int(value) if isinstance(value, int | float) else 0


def domain_usage(vm_uid: str, stats: Mapping[str, Any], vcpus: int, memory_kib: int) -> DomainUsage:
    """One domain's record of ``getAllDomainStats`` (its typed parameters, flattened by name)."""
    available, unused = stats.get("balloon.available"), stats.get("balloon.unused")
    if isinstance(available, int) and isinstance(unused, int):  # the guest's balloon driver reports
        used_kib = available - unused
    else:  # no balloon statistics: what QEMU's process holds is the nearest truth
        used_kib = _int(stats, "balloon.rss")
    disks = tuple(
        DiskCounters(
            str(stats.get(f"block.{i}.name", f"disk{i}")),
            read_bytes=_int(stats, f"block.{i}.rd.bytes"),
            write_bytes=_int(stats, f"block.{i}.wr.bytes"),
            read_ops=_int(stats, f"block.{i}.rd.reqs"),
            write_ops=_int(stats, f"block.{i}.wr.reqs"),
        )
        for i in range(_int(stats, "block.count"))
    )
    nics = tuple(
        NicCounters(
            str(stats.get(f"net.{i}.name", f"net{i}")),
            rx_bytes=_int(stats, f"net.{i}.rx.bytes"),
            tx_bytes=_int(stats, f"net.{i}.tx.bytes"),
            rx_packets=_int(stats, f"net.{i}.rx.pkts"),
            tx_packets=_int(stats, f"net.{i}.tx.pkts"),
        )
        for i in range(_int(stats, "net.count"))
    )
    return DomainUsage(
        vm_uid=vm_uid,
        vcpus=_int(stats, "vcpu.current") or vcpus,
        cpu_time_ns=_int(stats, "cpu.time"),
        memory_mib=memory_kib // KIB_PER_MIB,
        memory_used_mib=round(used_kib / KIB_PER_MIB, 1),
        disks=disks,
        nics=nics,
    )


def host_usage(
    cpu: Mapping[str, int], memory: Mapping[str, int], cpus: int, load1: float | None
) -> HostUsage:
    """From ``getCPUStats(ALL_CPUS)`` (ns) and ``getMemoryStats(ALL_CELLS)`` (KiB)."""
    busy = cpu.get("user", 0) + cpu.get("kernel", 0)
    total_kib = memory.get("total", 0)
    free_kib = memory.get("free", 0) + memory.get("buffers", 0) + memory.get("cached", 0)
    return HostUsage(
        cpus=cpus,
        cpu_busy_ns=busy,
        cpu_total_ns=busy + cpu.get("idle", 0) + cpu.get("iowait", 0),
        memory_total_mib=total_kib / KIB_PER_MIB,
        memory_used_mib=max(0, total_kib - free_kib) / KIB_PER_MIB,
        load1=load1,
    )


def is_local(uri: str) -> bool:
    """The daemon runs on this machine (no host in the URI): its load average is ours."""
    return not urlsplit(uri).hostname


def sample(conn: Any, uri: str) -> UsageSample:
    """On a call-pool thread: the whole host, one round of calls."""
    lv = _libvirt.load()
    wanted = (
        lv.VIR_DOMAIN_STATS_CPU_TOTAL
        | lv.VIR_DOMAIN_STATS_BALLOON
        | lv.VIR_DOMAIN_STATS_BLOCK
        | lv.VIR_DOMAIN_STATS_INTERFACE
        | lv.VIR_DOMAIN_STATS_VCPU
    )
    domains = []
    for domain, stats in conn.getAllDomainStats(wanted, lv.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE):
        uid = vm_uid_of(domain.name())
        if uid:
            info = domain.info()  # state, max memory, memory, vCPUs, CPU time: no extra round trip
            domains.append(domain_usage(uid, stats, vcpus=int(info[3]), memory_kib=int(info[1])))
    node = conn.getInfo()
    try:
        memory = conn.getMemoryStats(lv.VIR_NODE_MEMORY_STATS_ALL_CELLS)
    except lv.libvirtError:  # a driver without it (libvirt's test driver): free memory only
        memory = {"total": int(node[1]) * KIB_PER_MIB, "free": int(conn.getFreeMemory()) // 1024}
    load1 = os.getloadavg()[0] if is_local(uri) else None
    cpu = conn.getCPUStats(lv.VIR_NODE_CPU_STATS_ALL_CPUS)
    return UsageSample(host_usage(cpu, memory, int(node[2]), load1), tuple(domains))


__all__ = ["domain_usage", "host_usage", "is_local", "sample"]
