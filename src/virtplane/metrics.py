"""The control plane's Prometheus metrics beyond the controllers' own (``reconcile/controller.py``):
what the alert rules of ``deploy/prometheus/alerts.yml`` ask about.

State is read from the cache when Prometheus scrapes (``FleetCollector``): whether each VM
is in the power state its run policy asks for, each host's resource state and connection,
and this replica's leadership. Nothing is kept beside the cache, so nothing can drift from
it; every replica reports what its cache shows (the rules take the maximum over replicas).
What leaves no state behind, a migration attempt that ended, is a counter incremented where
it ends (``PlaneMetrics``).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from virtplane.domain.conditions import VMCondition
from virtplane.domain.power import AT_REST_REASONS
from virtplane.domain.resources import HostConnection, HostResourceState, VirtualMachine
from virtplane.runtime.cache import Cache
from virtplane.runtime.leader import LeaderElector


class MigrationResult(StrEnum):
    COMPLETED = "completed"  # the VM runs on the target
    FAILED = "failed"  # the attempt failed; the VM stays on the source (it may be retried)


class PlaneMetrics:
    """Counters of events, registered on the control plane's registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.migrations_total = Counter(
            "virtplane_migrations_total",
            "Live-migration attempts that ended, by result (completed, failed).",
            ["result"],
            registry=registry if registry is not None else CollectorRegistry(),
        )
        for result in MigrationResult:  # zeros, so that rates exist before the first migration
            self.migrations_total.labels(result=result.value)

    def migration_ended(self, result: MigrationResult) -> None:
        self.migrations_total.labels(result=result.value).inc()


def in_desired_power_state(vm: VirtualMachine) -> bool:
    """The VM's last power decision (its Ready condition's reason) found it where its run
    policy wants it: running, stopped, or held by an operation. A VM not reconciled yet is not."""
    ready = next((c for c in vm.status.conditions if c.type == VMCondition.READY), None)
    return ready is not None and ready.reason in AT_REST_REASONS


class FleetCollector(Collector):
    """Gauges computed from the cache at each scrape. Call ``collect`` on the event loop that
    updates the cache (the /metrics route is async for that reason)."""

    def __init__(self, cache: Cache, elector: LeaderElector | None) -> None:
        self._cache = cache
        self._elector = elector

    def collect(self) -> Iterator[Metric]:
        vms = GaugeMetricFamily(
            "virtplane_vm_in_desired_power_state",
            "1 if the VM is in the power state its run policy and requests ask for, 0 while it "
            "is on its way there (starting, retrying a failed start, stopping) or not reconciled yet.",
            labels=["vm"],
        )
        for vm in self._cache.vms():
            if vm.metadata.deletion_requested_at is None:
                vms.add_metric([vm.metadata.name], 1.0 if in_desired_power_state(vm) else 0.0)
        yield vms
        states = GaugeMetricFamily(
            "virtplane_host_resource_state",
            "1 for the host's resource state (Enabled, Disabled, the maintenance states), 0 for the others.",
            labels=["host", "state"],
        )
        connections = GaugeMetricFamily(
            "virtplane_host_connection",
            "1 for the host's connection (Up, Disconnected, Down, Unknown), 0 for the others.",
            labels=["host", "connection"],
        )
        for host in self._cache.hosts():
            name = host.metadata.name
            for state in HostResourceState:
                states.add_metric([name, state.value], float(host.status.resource_state is state))
            for connection in HostConnection:
                connections.add_metric([name, connection.value], float(host.status.connection is connection))
        yield states
        yield connections
        if self._elector is not None:  # one process per store (SQLite) elects nobody
            lease = self._elector.name
            leading = GaugeMetricFamily(
                "virtplane_leader", "1 while this replica holds the lease and reconciles.", labels=["lease"]
            )
            leading.add_metric([lease], float(self._elector.is_leader))
            yield leading
            won = CounterMetricFamily(
                "virtplane_leader_acquisitions",
                "Times this replica became the leader.",
                labels=["lease"],
            )
            won.add_metric([lease], float(self._elector.acquisitions))
            yield won


__all__ = ["FleetCollector", "MigrationResult", "PlaneMetrics", "in_desired_power_state"]
