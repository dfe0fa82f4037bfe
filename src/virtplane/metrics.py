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
from virtplane.domain.resources import (
    BackupPhase,
    BackupPolicy,
    HostConnection,
    HostResourceState,
    VerificationResult,
    VirtualMachine,
    VirtualMachineBackup,
)
from virtplane.domain.selectors import parse_label_selector
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
        self.backup_verify_failures = Counter(
            "virtplane_backup_verify_failures_total",
            "Backup verifications that found a backup's files broken, by VM.",
            ["vm"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

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


class BackupCollector(Collector):
    """Backups' gauges from the cache at each scrape (issue 36): per VM, its newest successful
    backup (when it ended, how long it took, what it wrote), since when a policy covers it
    (the alert "no successful backup in 26 h" reads both), and the kept backups whose last
    verification failed."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, text: str, labels: tuple[str, ...] = ("vm",)) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=list(labels))

        ended = gauge(
            "virtplane_backup_last_success_timestamp_seconds", "When the VM's newest successful backup ended."
        )
        took = gauge(
            "virtplane_backup_last_duration_seconds", "How long the VM's newest successful backup took."
        )
        wrote = gauge("virtplane_backup_last_written_bytes", "What the VM's newest successful backup wrote.")
        broken = gauge(
            "virtplane_backup_verification_failed",
            "1 for a kept backup whose last verification failed.",
            ("vm", "backup"),
        )
        newest: dict[str, VirtualMachineBackup] = {}
        for b in self._cache.backups():
            finished = b.status.finished_at
            if b.metadata.deletion_requested_at is not None or finished is None:
                continue
            check = b.status.verification
            if check is not None and check.result is VerificationResult.FAILED:
                broken.add_metric([b.spec.vm, b.metadata.name], 1.0)
            if b.status.phase is BackupPhase.SUCCEEDED:
                kept = newest.get(b.spec.vm)
                if kept is None or (kept.status.finished_at or finished) < finished:
                    newest[b.spec.vm] = b
        for name, b in sorted(newest.items()):
            assert b.status.finished_at is not None
            ended.add_metric([name], b.status.finished_at.timestamp())
            started = b.status.started_at or b.status.finished_at
            took.add_metric([name], (b.status.finished_at - started).total_seconds())
            wrote.add_metric([name], float(b.status.total_bytes))
        yield from (ended, took, wrote, broken)
        covered = gauge(
            "virtplane_backup_covered_since_timestamp_seconds",
            "Since when a backup policy covers the VM (the later of the two creations).",
            ("vm", "policy"),
        )
        vms = [vm for vm in self._cache.vms() if vm.metadata.deletion_requested_at is None]
        for policy in self._cache.objects(BackupPolicy):
            selector = parse_label_selector(policy.spec.selector)
            for vm in vms:
                if selector.matches(vm.metadata.labels):
                    since = max(
                        t for t in (policy.metadata.created_at, vm.metadata.created_at) if t is not None
                    )
                    covered.add_metric([vm.metadata.name, policy.metadata.name], since.timestamp())
        yield covered


__all__ = ["BackupCollector", "FleetCollector", "MigrationResult", "PlaneMetrics", "in_desired_power_state"]
