"""Per-VM and per-host usage for Prometheus, from the collector's latest round.

Counters where the hypervisor counts (CPU seconds, bytes, requests, packets: Prometheus'
``rate()`` handles their resets, when a domain restarts or moves), gauges for levels
(memory, load). Labels are bounded: ``vm`` and ``host`` only; disks and NICs are summed per
VM (the API has them per disk). Yielded from the history at each scrape, never kept in
labelled metric objects, so 10,000 VMs cost one pass over a dict per scrape and a deleted
VM's series ends with its history. Only figures from the last two rounds are shown: a VM
that stopped, or a host no longer answering, drops out rather than showing a frozen value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from virtplane.drivers.stats import DomainUsage, HostUsage
from virtplane.runtime.usage import UsageHistory

MIB = 1024 * 1024
_VM_COUNTERS: tuple[tuple[str, str, Callable[[DomainUsage], float]], ...] = (
    ("virtplane_vm_cpu_seconds", "CPU time of all the VM's vCPUs.", lambda u: u.cpu_time_ns / 1e9),
    (
        "virtplane_vm_disk_read_bytes",
        "Bytes read from all its disks.",
        lambda u: sum(d.read_bytes for d in u.disks),
    ),
    (
        "virtplane_vm_disk_written_bytes",
        "Bytes written to all its disks.",
        lambda u: sum(d.write_bytes for d in u.disks),
    ),
    (
        "virtplane_vm_disk_reads",
        "Read requests to all its disks.",
        lambda u: sum(d.read_ops for d in u.disks),
    ),
    (
        "virtplane_vm_disk_writes",
        "Write requests to all its disks.",
        lambda u: sum(d.write_ops for d in u.disks),
    ),
    (
        "virtplane_vm_network_receive_bytes",
        "Bytes received on all its NICs.",
        lambda u: sum(n.rx_bytes for n in u.nics),
    ),
    (
        "virtplane_vm_network_transmit_bytes",
        "Bytes sent on all its NICs.",
        lambda u: sum(n.tx_bytes for n in u.nics),
    ),
    (
        "virtplane_vm_network_receive_packets",
        "Packets received on all its NICs.",
        lambda u: sum(n.rx_packets for n in u.nics),
    ),
    (
        "virtplane_vm_network_transmit_packets",
        "Packets sent on all its NICs.",
        lambda u: sum(n.tx_packets for n in u.nics),
    ),
)
_VM_GAUGES: tuple[tuple[str, str, Callable[[DomainUsage], float]], ...] = (
    (
        "virtplane_vm_vcpus",
        "The VM's vCPUs (divide its CPU seconds' rate by it for a share).",
        lambda u: u.vcpus,
    ),
    ("virtplane_vm_memory_bytes", "Memory the VM was given.", lambda u: u.memory_mib * MIB),
    (
        "virtplane_vm_memory_used_bytes",
        "Memory the guest uses (balloon statistics, else QEMU's RSS).",
        lambda u: u.memory_used_mib * MIB,
    ),
)
_HOST_METRICS: tuple[tuple[str, str, bool, Callable[[HostUsage], float | None]], ...] = (
    (
        "virtplane_host_cpu_busy_seconds",
        "The host's CPU time busy (user and kernel), all CPUs.",
        True,
        lambda u: u.cpu_busy_ns / 1e9,
    ),
    (
        "virtplane_host_cpu_seconds",
        "The host's CPU time that passed (busy, idle, iowait), all CPUs.",
        True,
        lambda u: u.cpu_total_ns / 1e9,
    ),
    ("virtplane_host_cpus", "The host's CPUs.", False, lambda u: u.cpus),
    ("virtplane_host_memory_bytes", "The host's memory.", False, lambda u: u.memory_total_mib * MIB),
    (
        "virtplane_host_memory_used_bytes",
        "The host's memory in use (not free, buffers or cache).",
        False,
        lambda u: u.memory_used_mib * MIB,
    ),
    (
        "virtplane_host_load1",
        "The host's 1-minute load average (where the hypervisor is local).",
        False,
        lambda u: u.load1,
    ),
)

VM_METRIC_NAMES = tuple(f"{name}_total" for name, _, _ in _VM_COUNTERS) + tuple(n for n, _, _ in _VM_GAUGES)
HOST_METRIC_NAMES = tuple(f"{n}_total" if counter else n for n, _, counter, _ in _HOST_METRICS)


class UsageMetrics(Collector):
    """Yields the history's latest round at each scrape (on the event loop that fills it)."""

    def __init__(self, history: UsageHistory) -> None:
        self._history = history

    def collect(self) -> Iterator[Metric]:
        vms = self._history.counters_now()
        for name, help_text, figure in _VM_COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=["vm", "host"])
            for vm, usage in vms:
                counter.add_metric([vm.vm, vm.host], figure(usage))
            yield counter
        for name, help_text, figure in _VM_GAUGES:
            gauge = GaugeMetricFamily(name, help_text, labels=["vm", "host"])
            for vm, usage in vms:
                gauge.add_metric([vm.vm, vm.host], figure(usage))
            yield gauge
        hosts = self._history.host_counters_now()
        for name, help_text, is_counter, host_figure in _HOST_METRICS:
            family: Metric = (
                CounterMetricFamily(name, help_text, labels=["host"])
                if is_counter
                else GaugeMetricFamily(name, help_text, labels=["host"])
            )
            for host, host_usage in hosts:
                value = host_figure(host_usage)
                if value is not None:
                    family.add_metric([host], value)  # type: ignore[attr-defined]
            yield family


__all__ = ["HOST_METRIC_NAMES", "VM_METRIC_NAMES", "UsageMetrics"]
