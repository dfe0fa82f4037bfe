"""Counters into rates (``runtime/usage_rates``): resets, migrations, gaps, and the sums."""

from __future__ import annotations

import math

from virtplane.drivers.stats import DiskCounters, DomainUsage, HostUsage, NicCounters
from virtplane.runtime.usage_rates import VM_METRICS, host_rates, per_second, vm_rates


def usage(cpu_s: float, *, read: int = 0, write: int = 0, rx: int = 0, vcpus: int = 2) -> DomainUsage:
    return DomainUsage(
        vm_uid="u1",
        vcpus=vcpus,
        cpu_time_ns=int(cpu_s * 1e9),
        memory_mib=1024,
        memory_used_mib=300.0,
        disks=(
            DiskCounters(
                "vda", read_bytes=read, write_bytes=write, read_ops=read // 4096, write_ops=write // 4096
            ),
            DiskCounters("vdb"),
        ),
        nics=(NicCounters("vnet0", rx_bytes=rx, rx_packets=rx // 1000),),
    )


def test_cpu_is_a_share_of_the_vms_own_vcpus() -> None:
    rates = vm_rates(usage(15.0), usage(5.0), elapsed=10.0)  # 1 s of CPU per second, 2 vCPUs
    assert rates.of("cpu_pct") == 50.0
    assert rates.of("memory_used_mib") == 300.0


def test_disk_and_network_per_device_and_summed() -> None:
    rates = vm_rates(
        usage(1, read=40_960, write=81_920, rx=20_000), usage(1, read=0, write=0, rx=0), elapsed=10.0
    )
    assert [d.name for d in rates.disks] == ["vda", "vdb"]
    assert rates.disks[0].write_bps == 8192.0 and rates.disks[1].write_bps == 0.0
    assert rates.of("disk_read_bps") == 4096.0
    assert rates.of("disk_write_iops") == 2.0
    assert rates.of("net_rx_bps") == 2000.0 and rates.of("net_rx_pps") == 2.0


def test_a_counter_that_went_back_is_a_reset_not_a_negative_rate() -> None:
    """The domain restarted between two samples: its new process counts from zero."""
    rates = vm_rates(usage(1.0, write=10), usage(500.0, write=10_000_000), elapsed=10.0)
    assert math.isnan(rates.of("cpu_pct")) and math.isnan(rates.of("disk_write_bps"))
    assert rates.of("memory_used_mib") == 300.0  # a level: known at every sample
    assert math.isnan(per_second(5, 9, 10.0))


def test_no_sample_before_gives_memory_only() -> None:
    """The first sample, or the first on a host the VM migrated to (the collector passes None)."""
    rates = vm_rates(usage(500.0), None, elapsed=0.0)
    values = dict(zip(VM_METRICS, rates.values, strict=True))
    assert values.pop("memory_used_mib") == 300.0
    assert all(math.isnan(v) for v in values.values())


def test_a_missing_sample_lengthens_the_interval() -> None:
    """Samples at 0 s and 30 s (the one at 20 s missed): the average over 30 s."""
    assert vm_rates(usage(30.0), usage(0.0), elapsed=30.0).of("cpu_pct") == 50.0


def test_a_vm_without_disks_or_nics_moves_zero_bytes() -> None:
    bare = DomainUsage("u", vcpus=1, cpu_time_ns=2, memory_mib=1, memory_used_mib=1)
    rates = vm_rates(bare, DomainUsage("u", vcpus=1, cpu_time_ns=1, memory_mib=1, memory_used_mib=1), 10.0)
    assert rates.of("disk_read_bps") == 0.0 and rates.of("net_tx_pps") == 0.0


def test_host_cpu_is_busy_over_all_time_and_io_is_the_sum_of_its_vms() -> None:
    old = HostUsage(4, cpu_busy_ns=10, cpu_total_ns=100, memory_total_mib=8192, memory_used_mib=1000)
    new = HostUsage(
        4, cpu_busy_ns=35, cpu_total_ns=200, memory_total_mib=8192, memory_used_mib=2000, load1=1.5
    )
    vm = vm_rates(usage(1, write=10_000), usage(1), elapsed=10.0)
    cpu, used, total, load, read, write, rx, _tx = host_rates(new, old, [vm, vm])
    assert (cpu, used, total, load) == (25.0, 2000, 8192, 1.5)
    assert write == 2000.0 and read == 0.0 and rx == 0.0
    assert math.isnan(host_rates(new, None, [])[0])
    assert math.isnan(host_rates(old, new, [])[0])  # the host rebooted: its counters went back


def test_a_vm_seen_on_another_host_has_no_rate_for_that_round() -> None:
    """Its counters there belong to another process, even when they are higher than before."""
    from virtplane.drivers.stats import UsageSample
    from virtplane.runtime.usage import UsageHistory

    history = UsageHistory()
    host = HostUsage(4, cpu_busy_ns=0, cpu_total_ns=0, memory_total_mib=1, memory_used_mib=1)
    names = {"u1": "web"}.get
    history.record(100.0, {"h1": UsageSample(host, (usage(100.0),))}, names)
    history.record(110.0, {"h1": UsageSample(host, (usage(110.0),))}, names)
    assert history.vms["u1"].rates.of("cpu_pct") == 50.0
    history.record(120.0, {"h2": UsageSample(host, (usage(300.0),))}, names)
    assert history.vms["u1"].host == "h2" and math.isnan(history.vms["u1"].rates.of("cpu_pct"))
    history.record(130.0, {"h2": UsageSample(host, (usage(310.0),))}, names)
    assert history.vm_columns("u1", since=0.0).columns["cpu_pct"] == [None, 50.0, None, 50.0]
