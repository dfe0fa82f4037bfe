"""The usage collector: every ``interval_s``, one ``usage`` call per connected host, turned into
rates (``usage_rates``) and kept in memory (``usage_rings``) for the API, the metrics, ``top``
and placement.

The leader runs it (``ControlPlane._lead``), beside the other periodic loops. It uses only the
connections the host controller keeps open (``HostConnections.cached``): an unreachable host
is the host controller's to retry, and its VMs simply miss the round. A VM's history goes
with the VM (its uid is no longer in the cache); a host's with the host.

Nothing here is written to the store: usage is telemetry, not intent (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from virtplane.domain.resources import HostConnection
from virtplane.drivers.errors import DriverError
from virtplane.drivers.stats import DomainUsage, HostUsage, UsageSample
from virtplane.runtime.cache import Cache
from virtplane.runtime.hosts import HostConnections
from virtplane.runtime.usage_rates import HOST_METRICS, VM_METRICS, VMRates, host_rates, vm_rates
from virtplane.runtime.usage_rings import Columns, Resolution, Series, Timeline, read

log = logging.getLogger("virtplane.usage")

INTERVAL_S = 10.0
"""libvirt's own counters are exact at any interval; 10 s sees a burst within two rounds (20 s),
keeps an hour in 360 slots, and at 10,000 VMs costs one bulk call per host every 10 s."""


@dataclass(frozen=True, slots=True)
class VMNow:
    """A VM's latest figures (for ``top``, the metrics and the API's ``current``)."""

    vm: str
    host: str
    at: float
    tick: int
    rates: VMRates


@dataclass(frozen=True, slots=True)
class HostNow:
    host: str
    at: float
    tick: int
    values: tuple[float, ...]  # HOST_METRICS' order

    def of(self, metric: str) -> float:
        return self.values[HOST_METRICS.index(metric)]


@dataclass(frozen=True, slots=True)
class _Last:
    host: str
    at: float
    usage: DomainUsage


class UsageHistory:
    """The collected figures: the latest per VM and host, and their rings."""

    def __init__(self, interval_s: float = INTERVAL_S, resolution: Resolution | None = None) -> None:
        self.interval_s = interval_s
        self.resolution = resolution or Resolution()
        self.timeline = Timeline(self.resolution)
        self.collecting = False  # a collector runs into it (on the leader)
        self.vms: dict[str, VMNow] = {}  # by uid
        self.hosts: dict[str, HostNow] = {}  # by name
        self._vm_series: dict[str, Series] = {}
        self._host_series: dict[str, Series] = {}
        self._last_vm: dict[str, _Last] = {}
        self._last_host: dict[str, tuple[float, HostUsage]] = {}

    def record(
        self,
        at: float,
        samples: dict[str, UsageSample],
        vm_names: Callable[[str], str | None],
        answered: dict[str, float] | None = None,
    ) -> int:
        """One round at ``at``: ``samples`` by host name (the hosts that answered), and when each
        answered (``answered``; default ``at``): rates divide by the time between two answers
        of the same host, so a slow host in the round does not skew the others. Returns the tick."""
        tick = self.timeline.advance(at)
        for host, sample in samples.items():
            at = answered.get(host, at) if answered else at
            rates = [self._record_vm(tick, at, host, usage, vm_names) for usage in sample.domains]
            known = [r for r in rates if r is not None]
            before = self._last_host.get(host)
            values = host_rates(sample.host, before[1] if before else None, known)
            self._last_host[host] = (at, sample.host)
            self.hosts[host] = HostNow(host, at, tick, values)
            self._series(self._host_series, host, len(HOST_METRICS)).write(tick, values, self.resolution)
        return tick

    def _record_vm(
        self, tick: int, at: float, host: str, usage: DomainUsage, vm_names: Callable[[str], str | None]
    ) -> VMRates | None:
        name = vm_names(usage.vm_uid)
        if name is None:  # a domain of a VM being deleted, or not ours yet
            return None
        last = self._last_vm.get(usage.vm_uid)
        same_process = last is not None and last.host == host
        rates = vm_rates(usage, last.usage if last and same_process else None, at - last.at if last else 0.0)
        self._last_vm[usage.vm_uid] = _Last(host, at, usage)
        self.vms[usage.vm_uid] = VMNow(name, host, at, tick, rates)
        series = self._series(self._vm_series, usage.vm_uid, len(VM_METRICS))
        if series.last < tick:  # a VM seen on two hosts in one round (mid-migration): the first
            series.write(tick, rates.values, self.resolution)
        return rates

    def _series(self, table: dict[str, Series], key: str, width: int) -> Series:
        found = table.get(key)
        if found is None:
            found = table[key] = Series(width, self.resolution)
        return found

    def forget(self, vm_uids: set[str], hosts: set[str]) -> None:
        """Keep only these VMs' and hosts' histories (the others were deleted)."""
        for vm_table in (self._vm_series, self._last_vm, self.vms):
            _keep_only(vm_table, vm_uids)
        for host_table in (self._host_series, self._last_host, self.hosts):
            _keep_only(host_table, hosts)

    def fresh(self, tick: int) -> bool:
        """Whether a figure of ``tick`` is "now": from the last round or the one before (a host
        that missed one round is not dropped; a stopped VM or a silent host is after two)."""
        return tick >= self.timeline.tick - 1

    def current_vms(self) -> list[VMNow]:
        return [vm for vm in self.vms.values() if self.fresh(vm.tick)]

    def current_hosts(self) -> list[HostNow]:
        return [host for host in self.hosts.values() if self.fresh(host.tick)]

    def counters_now(self) -> list[tuple[VMNow, DomainUsage]]:
        """The fresh VMs' latest figures with the counters they came from (for /metrics)."""
        return [
            (vm, last.usage)
            for uid, vm in self.vms.items()
            if self.fresh(vm.tick) and (last := self._last_vm.get(uid)) is not None
        ]

    def host_counters_now(self) -> list[tuple[str, HostUsage]]:
        return [(host, self._last_host[host][1]) for host, now in self.hosts.items() if self.fresh(now.tick)]

    def vm_columns(self, uid: str, since: float) -> Columns:
        return read(self._vm_series.get(uid), self.timeline, VM_METRICS, since)

    def host_columns(self, host: str, since: float) -> Columns:
        return read(self._host_series.get(host), self.timeline, HOST_METRICS, since)

    @property
    def nbytes(self) -> int:
        series = [*self._vm_series.values(), *self._host_series.values()]
        return sum(s.nbytes for s in series)


def _keep_only(table: dict[str, Any], keys: set[str]) -> None:
    for key in [key for key in table if key not in keys]:
        del table[key]


class UsageCollector:
    """The leader's loop: ``run`` until cancelled; ``collect_once`` is one round (tests call it)."""

    def __init__(
        self,
        cache: Cache,
        hosts: HostConnections,
        history: UsageHistory,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.hosts = hosts
        self.history = history
        self.wall_clock = wall_clock

    async def _sample(self, uri: str) -> tuple[float, UsageSample] | None:
        driver = self.hosts.cached(uri)
        if driver is None:
            return None
        try:
            sample = await driver.usage()
            return self.wall_clock(), sample
        except DriverError as exc:  # the host controller hears of it on its own call
            log.debug("usage of %s: %s", uri, exc)
            return None

    async def collect_once(self) -> int:
        hosts = [h for h in self.cache.hosts() if h.status.connection is HostConnection.UP]
        answers = await asyncio.gather(*(self._sample(h.spec.uri) for h in hosts))
        answered = {h.metadata.name: a for h, a in zip(hosts, answers, strict=True) if a is not None}
        tick = self.history.record(
            self.wall_clock(),
            {host: sample for host, (_, sample) in answered.items()},
            self.cache.vm_by_uid,
            {host: at for host, (at, _) in answered.items()},
        )
        if tick % 6 == 0:  # deleted VMs and hosts: every minute is soon enough
            self.history.forget(
                {vm.metadata.uid for vm in self.cache.vms()}, {h.metadata.name for h in self.cache.hosts()}
            )
        return tick

    async def run(self) -> None:
        """Collect every interval until cancelled (the replica stepped down, or stops)."""
        self.history.collecting = True
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.collect_once()
                except Exception:
                    log.warning("usage: a collection round failed", exc_info=True)
                await asyncio.sleep(max(0.0, self.history.interval_s - (time.monotonic() - started)))
        finally:
            self.history.collecting = False


__all__ = ["INTERVAL_S", "HostNow", "UsageCollector", "UsageHistory", "VMNow"]
