"""The libvirt driver's usage: ``getAllDomainStats`` records into counters, and one call on
libvirt's test driver (no daemon) for the host's own figures."""

from __future__ import annotations

from typing import Any

from virtplane.drivers.libvirt.usage import domain_usage, host_usage, is_local

QEMU_RECORD = {
    "cpu.time": 7_000_000_000,
    "vcpu.current": 2,
    "balloon.current": 1048576,
    "balloon.rss": 204800,
    "block.count": 2,
    "block.0.name": "vda",
    "block.0.rd.bytes": 4096,
    "block.0.wr.bytes": 8192,
    "block.0.rd.reqs": 1,
    "block.0.wr.reqs": 2,
    "block.1.name": "hdc",
    "net.count": 1,
    "net.0.name": "vnet0",
    "net.0.rx.bytes": 1500,
    "net.0.rx.pkts": 1,
    "net.0.tx.bytes": 3000,
    "net.0.tx.pkts": 2,
}


def test_a_domains_record_becomes_its_counters() -> None:
    usage = domain_usage("u1", QEMU_RECORD, vcpus=1, memory_kib=1048576)
    assert (usage.vm_uid, usage.vcpus, usage.cpu_time_ns, usage.memory_mib) == ("u1", 2, 7_000_000_000, 1024)
    assert usage.memory_used_mib == 200.0  # no balloon statistics: QEMU's RSS
    assert [(d.name, d.read_bytes, d.write_ops) for d in usage.disks] == [("vda", 4096, 2), ("hdc", 0, 0)]
    assert [(n.name, n.rx_bytes, n.tx_packets) for n in usage.nics] == [("vnet0", 1500, 2)]


def test_the_guests_balloon_statistics_win_over_rss() -> None:
    record = {**QEMU_RECORD, "balloon.available": 1000 * 1024, "balloon.unused": 600 * 1024}
    assert domain_usage("u1", record, vcpus=1, memory_kib=1048576).memory_used_mib == 400.0


def test_the_hosts_cpu_and_memory() -> None:
    cpu = {"user": 30, "kernel": 10, "idle": 50, "iowait": 10}
    memory = {"total": 8192 * 1024, "free": 4096 * 1024, "buffers": 1024 * 1024, "cached": 1024 * 1024}
    host = host_usage(cpu, memory, cpus=4, load1=None)
    assert (host.cpu_busy_ns, host.cpu_total_ns) == (40, 100)
    assert (host.memory_total_mib, host.memory_used_mib, host.load1) == (8192, 2048, None)


def test_only_a_local_daemons_load_is_ours() -> None:
    assert is_local("qemu:///system") and is_local("test:///default")
    assert not is_local("qemu+ssh://root@node-2/system")


async def test_one_call_on_the_test_driver(libvirt_driver: Any) -> None:
    sample = await libvirt_driver.usage()
    assert sample.domains == ()  # its only domain ("test") is not one of ours
    assert sample.host.cpus == 8 and sample.host.memory_total_mib == 16384
    assert sample.host.cpu_total_ns >= sample.host.cpu_busy_ns > 0
