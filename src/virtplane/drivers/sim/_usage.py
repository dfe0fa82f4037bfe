"""What a simulated host reports of its use (``SimDriver.usage``), as a real one would.

Each running domain's guest has a load (``SimLoad``, set per domain with ``SimCloud.set_load``
like a fault, and following the domain across hosts as its guest does): a share of its vCPUs
kept busy, a share of its memory in use, and disk and network rates. The counters grow with
that load over the world's clock, lazily (at each sample, by the time since the one before).
Like QEMU's: they start at zero with each new process of the domain (a boot, or its arrival
on a host by migration), so a collector sees a reset, never a jump back it must believe.
Stopped domains report nothing. Not in the state file: a restarted simulator starts every
counter again, as restarted QEMUs would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from virtplane.drivers.base import DomainState
from virtplane.drivers.stats import DiskCounters, DomainUsage, HostUsage, NicCounters, UsageSample

from ._model import SimDomain

DISK_OP_BYTES = 64 * 1024  # a guest's typical request: ops/s follow the bytes/s
PACKET_BYTES = 1500
HOST_OWN_MIB = 512  # the host's own processes and page cache, beyond its guests
RUNNING = (DomainState.RUNNING, DomainState.MIGRATING)
_DISK_NAMES = tuple(f"vd{chr(ord('a') + i)}" for i in range(26))


@dataclass(frozen=True)
class SimLoad:
    cpu: float = 0.02  # share of the domain's vCPUs kept busy, 0..1
    memory: float = 0.4  # share of its memory the guest uses, 0..1
    disk_read_bps: float = 0.0
    disk_write_bps: float = 0.0
    net_rx_bps: float = 0.0
    net_tx_bps: float = 0.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.cpu <= 1.0 and 0.0 <= self.memory <= 1.0):
            raise ValueError("cpu and memory are shares from 0 to 1")
        if min(self.disk_read_bps, self.disk_write_bps, self.net_rx_bps, self.net_tx_bps) < 0:
            raise ValueError("I/O rates cannot be negative")


IDLE = SimLoad()


@dataclass
class _Counters:
    """One process's counters (a domain's on one host, since its last boot there)."""

    boots: int
    at: float
    cpu_ns: float = 0.0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    rx_bytes: float = 0.0
    tx_bytes: float = 0.0

    def advance(self, load: SimLoad, vcpus: int, now: float) -> None:
        elapsed = max(0.0, now - self.at)
        self.at = now
        self.cpu_ns += load.cpu * vcpus * elapsed * 1e9
        self.read_bytes += load.disk_read_bps * elapsed
        self.write_bytes += load.disk_write_bps * elapsed
        self.rx_bytes += load.net_rx_bps * elapsed
        self.tx_bytes += load.net_tx_bps * elapsed


@dataclass
class _HostCounters:
    at: float
    busy_ns: float = 0.0
    total_ns: float = 0.0


@dataclass
class SimMeters:
    """The guests' loads, by domain name, and the counters of each host's processes."""

    clock: Callable[[], float]
    loads: dict[str, SimLoad] = field(default_factory=dict)
    _domains: dict[str, dict[str, _Counters]] = field(default_factory=dict)  # host -> domain -> counters
    _hosts: dict[str, _HostCounters] = field(default_factory=dict)

    def load_of(self, domain: str) -> SimLoad:
        return self.loads.get(domain, IDLE)

    def sample(self, host: str, vcpus: int, memory_mib: int, domains: list[SimDomain]) -> UsageSample:
        now = self.clock()
        running = [d for d in domains if d.state in RUNNING and d.live is not None]
        before = self._domains.get(host, {})
        # a domain not running now is forgotten: its next process counts from zero
        counters = self._domains[host] = {d.name: before[d.name] for d in running if d.name in before}
        usages = [self._domain(counters, d, now) for d in running]
        own = self._hosts.setdefault(host, _HostCounters(at=now))
        elapsed = max(0.0, now - own.at)
        own.at = now
        busy_share = sum(self.load_of(d.name).cpu * _vcpus(d) for d in running)
        own.total_ns += vcpus * elapsed * 1e9
        own.busy_ns += min(float(vcpus), busy_share + 0.01 * vcpus) * elapsed * 1e9
        used = min(float(memory_mib), HOST_OWN_MIB + sum(u.memory_used_mib for u in usages))
        usage = HostUsage(
            cpus=vcpus,
            cpu_busy_ns=int(own.busy_ns),
            cpu_total_ns=int(own.total_ns),
            memory_total_mib=float(memory_mib),
            memory_used_mib=used,
            load1=round(busy_share, 2),
        )
        return UsageSample(usage, tuple(usages))

    def _domain(self, on_host: dict[str, _Counters], domain: SimDomain, now: float) -> DomainUsage:
        counters = on_host.get(domain.name)
        if counters is None or counters.boots != domain.boots:
            counters = on_host[domain.name] = _Counters(boots=domain.boots, at=now)
        load = self.load_of(domain.name)
        live = domain.live
        assert live is not None
        counters.advance(load, live.cpu, now)
        # the first disk and NIC take the guest's I/O: one busy device is enough for a sim
        disks: tuple[DiskCounters, ...] = ()
        if live.disks:
            read, write = int(counters.read_bytes), int(counters.write_bytes)
            busy = DiskCounters("vda", read, write, read // DISK_OP_BYTES, write // DISK_OP_BYTES)
            disks = (busy, *(DiskCounters(_DISK_NAMES[i]) for i in range(1, len(live.disks))))
        nics: tuple[NicCounters, ...] = ()
        if live.nics:
            rx, tx = int(counters.rx_bytes), int(counters.tx_bytes)
            first = NicCounters(live.nics[0].mac, rx, tx, rx // PACKET_BYTES, tx // PACKET_BYTES)
            nics = (first, *(NicCounters(nic.mac) for nic in live.nics[1:]))
        return DomainUsage(
            vm_uid=live.vm_uid,
            vcpus=live.cpu,
            cpu_time_ns=int(counters.cpu_ns),
            memory_mib=live.memory_mib,
            memory_used_mib=round(live.memory_mib * load.memory, 1),
            disks=disks,
            nics=nics,
        )


def _vcpus(domain: SimDomain) -> int:
    return domain.live.cpu if domain.live is not None else 0


__all__ = ["IDLE", "SimLoad", "SimMeters"]
