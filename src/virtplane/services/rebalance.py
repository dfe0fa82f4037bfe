"""Rebalancing for the API: a cluster's balance, a plan now, the last look, a plan carried out.

Wraps the leader's ``Rebalancer`` (``controllers.rebalance``). Showing and planning change
nothing; ``apply`` carries out a plan now, as automatic mode would (the same pause, limits
and migration path), whatever the cluster's mode.
"""

from __future__ import annotations

from typing import Any

from virtplane.controllers.rebalance import ClusterRebalance, Rebalancer
from virtplane.domain.errors import NotFound
from virtplane.domain.rebalance import RebalancePlan
from virtplane.domain.settings_rebalance import RebalanceMode

__all__ = ["RebalanceService"]


def _plan(plan: RebalancePlan, cluster: str) -> dict[str, Any]:
    before, after = plan.before.get(cluster), plan.after.get(cluster)
    return {
        "moves": [
            {
                "vm": m.vm,
                "source": m.source,
                "target": m.target,
                "reason": m.reason,
                "std_before": round(m.before, 5),
                "std_after": round(m.after, 5),
                "gain": round(m.gain, 6),
            }
            for m in plan.moves
        ],
        "std_after": round(after.std, 5) if after else 0.0,
        "spread_after": round(after.spread, 5) if after else 0.0,
        "std_before": round(before.std, 5) if before else 0.0,
        "unmovable": dict(sorted(plan.unmovable.items())),
        "unrepaired": list(plan.unrepaired),
    }


def _look(look: ClusterRebalance | None) -> dict[str, Any] | None:
    if look is None:
        return None
    return {
        "at": look.at.isoformat(),
        "mode": look.mode.value,
        "paused": look.paused,
        "started": list(look.started),
        "waiting": dict(look.waiting),
        "plan": _plan(look.plan, look.cluster),
    }


class RebalanceService:
    def __init__(self, rebalancer: Rebalancer) -> None:
        self.rebalancer = rebalancer

    def _known(self, cluster: str) -> None:
        if cluster not in self.rebalancer.clusters():
            raise NotFound("NotFound", f"cluster {cluster} has no hosts")

    def show(self, cluster: str) -> dict[str, Any]:
        """The cluster's mode, its balance now, the plan now, and the leader's last look."""
        self._known(cluster)
        plan = self.rebalancer.plan(cluster)
        balance = plan.before.get(cluster)
        return {
            "cluster": cluster,
            "mode": self.rebalancer.mode(cluster).value,
            "balance": {
                "hosts": {h: round(v, 5) for h, v in balance.hosts.items()} if balance else {},
                "std": round(balance.std, 5) if balance else 0.0,
                "spread": round(balance.spread, 5) if balance else 0.0,
                "mean": round(balance.mean, 5) if balance else 0.0,
            },
            "plan": _plan(plan, cluster),
            "last": _look(self.rebalancer.last.get(cluster)),
        }

    async def apply(self, cluster: str) -> dict[str, Any]:
        """Plan and carry out the moves now (as automatic mode does); the look, as ``last``."""
        self._known(cluster)
        look = await self.rebalancer.look(cluster, RebalanceMode.AUTOMATIC)
        shown = _look(look)
        assert shown is not None
        return shown
