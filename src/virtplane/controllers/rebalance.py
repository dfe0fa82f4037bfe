"""Rebalancing each cluster (issue 37): plan, and in automatic mode carry out, live migrations.

The leader runs ``Rebalancer.run``: every ``rebalance.interval_s`` it looks at each cluster
whose ``rebalance.mode`` is not off. In ``plan`` it computes the plan (``domain.rebalance``)
and keeps it for the API; in ``automatic`` it also starts the plan's moves, each through the
migration coordinator's ``begin`` (the path every migration takes: the intent is written on
the VM before the driver is asked, the per-host and per-cluster migration slots hold, a VM
never runs on two hosts), at most ``rebalance.max_moves_per_hour`` in an hour, and none while
a host of the cluster is in maintenance, failed, fencing or silent (``pause_reason``). A
move that finds no slot now waits for the next look; the plan is made afresh each time from
what the cache shows, so a move that the cluster no longer needs is never carried out.

Hysteresis across runs: a VM this rebalancer moved is not moved again for ``rebalance.hold_s``
(remembered in memory: a new leader starts without it, and the minimum gain still keeps a
move from being undone by the next plan). Every look that finds moves, and every move, is an
event on the VM or on the cluster's ``Cluster/<name>`` and a counter on /metrics.

The plan is kept in memory, not stored: it is derived from the cache and recomputed at every
look (``POST /v1/clusters/NAME/rebalance?dryRun`` computes one now on any replica).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge

from virtplane.controllers.migration import MigrationCoordinator
from virtplane.controllers.migration.flights import Refused, Started, Waiting
from virtplane.controllers.rebalance_inputs import Fleet, cluster_hosts, inputs, pause_reason, settings_of
from virtplane.domain.rebalance import RebalancePlan, plan_rebalance
from virtplane.domain.settings_rebalance import RebalanceMode
from virtplane.runtime.usage import UsageHistory

__all__ = ["ClusterRebalance", "Rebalancer", "requested_by"]

log = logging.getLogger("virtplane.rebalance")
HOUR = timedelta(hours=1)


def requested_by(cluster: str) -> str:
    """How a rebalance's migration intents name who asked for them."""
    return f"rebalance/{cluster}"


@dataclass
class ClusterRebalance:
    """What the last look at one cluster found and did."""

    cluster: str
    mode: RebalanceMode
    at: datetime
    plan: RebalancePlan
    paused: str = ""
    """Why automatic moves wait ("" when they don't)."""
    started: list[str] = field(default_factory=list)
    """The VMs whose moves this look started."""
    waiting: dict[str, str] = field(default_factory=dict)
    """VM → why its move did not start now (no slot, hourly limit, refused)."""


def _moves(plan: RebalancePlan) -> list[tuple[str, str]]:
    return [(m.vm, m.target) for m in plan.moves]


class RebalanceMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.plans = Counter(
            "virtplane_rebalance_plans_total",
            "Rebalance plans computed, by cluster.",
            ["cluster"],
            registry=registry,
        )
        self.moves = Counter(
            "virtplane_rebalance_moves_total",
            "Rebalance moves, by cluster and outcome (started, refused).",
            ["cluster", "outcome"],
            registry=registry,
        )
        self.spread = Gauge(
            "virtplane_rebalance_spread",
            "The standard deviation of the normalised host load of a cluster at the last look.",
            ["cluster"],
            registry=registry,
        )


class Rebalancer:
    def __init__(
        self,
        coordinator: MigrationCoordinator,
        usage: UsageHistory | None,
        *,
        registry: CollectorRegistry | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.ctx = coordinator.ctx
        self.usage = usage
        self.now = now or self.ctx.now
        self.metrics = RebalanceMetrics(registry)
        self.moved_at: dict[str, datetime] = {}
        """VM → when this rebalancer last started moving it (the hold)."""
        self.started: dict[str, deque[datetime]] = {}
        """Cluster → when its moves of the last hour started."""
        self.last: dict[str, ClusterRebalance] = {}
        """Cluster → its last look (the API's ``plan``)."""

    # ------------------------------------------------------------------ reading

    def mode(self, cluster: str) -> RebalanceMode:
        return RebalanceMode(str(self.ctx.settings.get("rebalance.mode", cluster=cluster)))

    def clusters(self) -> list[str]:
        return sorted({h.spec.cluster for h in self.ctx.cache.hosts()})

    def fleet(self) -> Fleet:
        """Every cluster's hosts and running VMs as the planner sees them now (read once a look)."""
        settings = self.ctx.settings
        hold = {c: float(settings.get("rebalance.hold_s", cluster=c)) for c in self.clusters()}
        return inputs(self.coordinator, self.usage, self.moved_at, self.now(), hold)

    def plan(self, cluster: str, fleet: Fleet | None = None) -> RebalancePlan:
        """The plan for ``cluster`` now, with its settings (pure: nothing is kept or moved);
        ``fleet``: the hosts and VMs read for this look's other clusters already."""
        settings = self.ctx.settings
        hosts, vms = fleet if fleet is not None else self.fleet()
        in_cluster = {h.view.name for h in hosts if h.view.cluster == cluster}
        hosts = [h for h in hosts if h.view.name in in_cluster]
        vms = [v for v in vms if v.view.host in in_cluster]
        return plan_rebalance(hosts, vms, settings_of(settings, cluster))

    # ------------------------------------------------------------------ acting

    async def run(self) -> None:
        """Look at every cluster, then wait ``rebalance.interval_s``; forever (the leader's task)."""
        while True:
            try:
                await self.run_once()
            except Exception:  # a look that failed is retried at the next; the loop must live
                log.exception("rebalance: a look at the clusters failed")
            await asyncio.sleep(float(self.ctx.settings.get("rebalance.interval_s")))

    async def run_once(self) -> list[ClusterRebalance]:
        looks = []
        fleet: Fleet | None = None  # read once, for the first cluster not off
        for cluster in self.clusters():
            mode = self.mode(cluster)
            if mode is RebalanceMode.OFF:
                self.last.pop(cluster, None)
                continue
            fleet = fleet or self.fleet()
            looks.append(await self.look(cluster, mode, fleet))
        return looks

    async def look(self, cluster: str, mode: RebalanceMode, fleet: Fleet | None = None) -> ClusterRebalance:
        now = self.now()
        plan = self.plan(cluster, fleet)
        look = ClusterRebalance(cluster, mode, now, plan)
        previous = self.last.get(cluster)
        self.last[cluster] = look
        self.metrics.plans.labels(cluster=cluster).inc()
        if cluster in plan.after:
            self.metrics.spread.labels(cluster=cluster).set(plan.before[cluster].std)
        if not plan.moves:
            return look
        before, after = plan.before[cluster], plan.after[cluster]
        summary = (
            f"{len(plan.moves)} move(s) would take the spread (std of host load) "
            f"from {before.std:.3f} to {after.std:.3f}"
        )
        # A plan or a pause that is the last look's again is said once, not every interval.
        same = previous is not None and previous.mode is mode and _moves(previous.plan) == _moves(plan)
        if mode is RebalanceMode.PLAN:
            if not same:
                self.ctx.event(("Cluster", cluster), "RebalancePlanned", summary)
            return look
        look.paused = pause_reason(cluster_hosts(self.ctx.cache.hosts(), cluster))
        if look.paused:
            if not (same and previous is not None and previous.paused == look.paused):
                self.ctx.event(("Cluster", cluster), "RebalancePaused", f"{summary}; paused: {look.paused}")
            return look
        self.ctx.event(("Cluster", cluster), "Rebalancing", summary)
        await self._carry_out(look, now)
        return look

    async def _carry_out(self, look: ClusterRebalance, now: datetime) -> None:
        cluster = look.cluster
        recent = self.started.setdefault(cluster, deque())
        while recent and now - recent[0] >= HOUR:
            recent.popleft()
        per_hour = int(self.ctx.settings.get("rebalance.max_moves_per_hour", cluster=cluster))
        for move in look.plan.moves:
            if len(recent) >= per_hour:
                look.waiting[move.vm] = (
                    f"{per_hour} moves started within the hour (rebalance.max_moves_per_hour)"
                )
                continue
            result = await self.coordinator.begin(
                move.vm, move.target, requested_by=requested_by(cluster), attempt=1
            )
            if isinstance(result, Started):
                recent.append(now)
                self.moved_at[move.vm] = now
                look.started.append(move.vm)
                self.metrics.moves.labels(cluster=cluster, outcome="started").inc()
                self.ctx.event(
                    ("VirtualMachine", move.vm),
                    "RebalanceMove",
                    f"from {move.source} to {move.target} ({move.reason}): the spread of cluster "
                    f"{cluster} from {move.before:.3f} to {move.after:.3f}",
                )
            elif isinstance(result, Waiting):
                look.waiting[move.vm] = result.message
            else:
                assert isinstance(result, Refused)
                look.waiting[move.vm] = result.message
                self.metrics.moves.labels(cluster=cluster, outcome="refused").inc()
                self.ctx.event(
                    ("VirtualMachine", move.vm),
                    "RebalanceMoveRefused",
                    f"to {move.target}: {result.message}",
                    warning=True,
                )
