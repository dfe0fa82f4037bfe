"""Rebalancing: a plan of live migrations that evens out host load within each cluster.

Pure. The objective is the spread of host load in a cluster, as the population standard
deviation of each host's normalised load (``balance.host_load``: measured CPU use and
allocation, weighted by ``real_use_weight``). The planner is greedy: each step takes, among
the most loaded hosts' VMs and the least loaded hosts, the move that lowers its cluster's
spread most, and keeps it only if the gain is at least ``min_gain`` (hysteresis: no move for
noise) and the placement engine (``choose_host`` with ``migration=True``) lets the VM go
there, so every rule placement knows (capacity, anti-affinity, host affinity, networks,
pools, CPU, and whatever rules it learns later) holds for every move. Each step reserves the
target and frees the source before the next, so the plan never over-commits a host.

Not moved: a VM that cannot live-migrate (its policy, local disks: the caller says why), one
moved recently (``RebalanceVM.recently_moved``, hysteresis across runs), one on a host that
is not Enabled and connected (a host in maintenance, failed or fencing is neither a source
nor a target, and does not count in the spread).

Rule repair comes first: ``violations`` (``rebalance_repair``) lists the VMs that break a
rule where they run now (two VMs of one anti-affinity group on a host, a VM outside its
host_affinity, a required placement rule broken there); each that still breaks it when its
turn comes is moved, before any balancing move, to the host placement picks among the least
loaded, and the move's reason names the rule. Preferred rules are not repaired.

A VM with VM-VM placement rules is judged against every host of its cluster (its fellow
members may run anywhere); the others against the source and target only (the fast path).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtplane.domain.host_states import accepts_vms
from virtplane.domain.placement import HostView, VMView, choose_host, release, reserve
from virtplane.domain.placement_rules import judge
from virtplane.domain.rebalance_balance import (
    Balance,
    ClusterLoad,
    RebalanceSettings,
    host_load,
    load_coefficients,
)
from virtplane.domain.rebalance_repair import Violation, fellows, member_totals, required_rules_broken_here
from virtplane.domain.rebalance_repair import violations as rules_violated
from virtplane.domain.resources import RuleType

__all__ = [
    "Move",
    "RebalanceHost",
    "RebalancePlan",
    "RebalanceSettings",
    "RebalanceVM",
    "Violation",
    "plan_rebalance",
    "violations",
]

SOURCES_PER_STEP = 4
"""How many of the most loaded hosts each greedy step takes VMs from."""
TARGETS_PER_STEP = 8
"""How many of the least loaded hosts each greedy step tries as targets."""
NEIGHBOURS = 4
"""How many VMs each side of the ideal size a step tries per pair of hosts."""
WIDENING = 4
"""When no move fits among those, the step looks this many times further once."""
REPAIR_TARGETS = 16
"""How many of the least loaded hosts a repair tries before it tries every host."""


@dataclass(frozen=True)
class RebalanceHost:
    view: HostView
    """Its placement view; ``used_*`` and ``anti_affinity_groups`` as the VMs on it make them."""
    cpu_use: float = 0.0
    """Measured CPU use, in cores (what the VMs use plus the host's own overhead)."""


@dataclass(frozen=True)
class RebalanceVM:
    view: VMView
    """Its placement view; ``view.host`` is where it runs (None: not running, left alone)."""
    cpu_use: float = 0.0
    """Measured CPU use, in cores."""
    cannot_move: str = ""
    """Why it must not be live-migrated (policy Never, local disks, ...); "" when it may."""
    recently_moved: bool = False
    """Moved by a rebalance within the hysteresis window: not moved again yet."""


@dataclass(frozen=True)
class Move:
    vm: str
    source: str
    target: str
    cluster: str
    before: float
    """The cluster's spread (standard deviation of host load) before the move."""
    after: float
    gain: float
    """How much it lowers the cluster's imbalance (n x the variance); what ``min_gain`` bounds."""
    reason: str


@dataclass(frozen=True)
class RebalancePlan:
    moves: tuple[Move, ...]
    before: Mapping[str, Balance]
    """Cluster → its balance now."""
    after: Mapping[str, Balance]
    """Cluster → its balance once every move is done."""
    unmovable: Mapping[str, str] = field(default_factory=dict)
    """VM → why it is not considered (cannot live-migrate, moved recently)."""
    unrepaired: tuple[str, ...] = ()
    """Violations no move could repair, each with the reason."""


def violations(hosts: Sequence[RebalanceHost], vms: Sequence[RebalanceVM]) -> list[Violation]:
    """The VMs that break a rule where they run now, in name order (``rebalance_repair``)."""
    return rules_violated([h.view for h in hosts], [v.view for v in vms])


class _Cluster:
    """One cluster's hosts, VMs and load while the plan is made (mutable, private)."""

    def __init__(self, name: str, hosts: list[RebalanceHost], weight: float) -> None:
        self.name = name
        self.weight = weight
        self.views: dict[str, HostView] = {h.view.name: h.view for h in hosts}
        self.vms: dict[str, dict[str, RebalanceVM]] = {name: {} for name in self.views}
        self.groups: dict[str, dict[str, int]] = {name: defaultdict(int) for name in self.views}
        self.movable: dict[str, list[tuple[float, str]]] = {name: [] for name in self.views}
        """Host → (the load its leaving takes off the host, name) of each VM that may move, sorted."""
        self.load = ClusterLoad({h.view.name: host_load(h.view, h.cpu_use, weight) for h in hosts})
        self.coefficients = {name: load_coefficients(view, weight) for name, view in self.views.items()}
        self.totals = member_totals(list(self.views.values()))
        """VM-VM rule → its VMs in the cluster (every host here takes VMs; moves keep it)."""

    def add_vm(self, vm: RebalanceVM, host: str, movable: bool) -> None:
        self.vms[host][vm.view.name] = vm
        if movable:
            bisect.insort(self.movable[host], (self.share(host, vm), vm.view.name))
        if vm.view.anti_affinity_group is not None:
            self.groups[host][vm.view.anti_affinity_group] += 1

    def share(self, host: str, vm: RebalanceVM) -> float:
        """What ``vm`` adds to ``host``'s load.

        The load is linear in what the VM brings (``load_of``): coefficients worked out once per
        host make this cheap, and the greedy step asks it hundreds of thousands of times for a
        large cluster.
        """
        per_cpu_use, per_vcpu, per_mib = self.coefficients[host]
        return per_cpu_use * vm.cpu_use + per_vcpu * vm.view.cpu + per_mib * vm.view.memory_mib

    def load_after(self, host: str, vm: RebalanceVM, sign: int) -> float:
        """``host``'s load with ``vm`` added (sign 1) or taken away (sign -1)."""
        return self.load.loads[host] + sign * self.share(host, vm)

    def apply(self, vm: RebalanceVM, source: str, target: str) -> None:
        source_load, target_load = self.load_after(source, vm, -1), self.load_after(target, vm, 1)
        del self.vms[source][vm.view.name]
        self.movable[source] = [m for m in self.movable[source] if m[1] != vm.view.name]
        moved = replace(vm, view=replace(vm.view, host=target))
        group = vm.view.anti_affinity_group
        if group is not None:
            self.groups[source][group] -= 1
        last = group is None or self.groups[source][group] <= 0
        self.views[source] = release(self.views[source], vm.view, last_of_group=last)
        self.views[target] = reserve(self.views[target], vm.view, copy_local_disks=False)
        self.add_vm(moved, target, movable=False)  # it moves once per plan
        self.load.set(source, source_load)
        self.load.set(target, target_load)

    def fits(self, vm: RebalanceVM, source: str, target: str) -> bool:
        """Whether placement lets ``vm`` move live from ``source`` to ``target`` now."""
        choice = choose_host(vm.view, [self.views[source], self.views[target]], migration=True)
        if choice.host != target or not any(rule.between_vms for rule in vm.view.rules):
            return choice.host == target
        # The two views do not see the VM's fellow members on the cluster's other hosts, where
        # its affinity anchors: judge the target again with all of them (kept as totals: a move
        # within the cluster does not change them; anchors() over 500 hosts per try is slow).
        view = self.views[target]
        anchored = fellows(vm.view, self.totals)
        return not judge(vm.view.rules, view.labels, view.rule_members, anchored, self_here=False).required

    def violations(self) -> list[Violation]:
        """The VMs that break a rule where they run now, in this plan's state."""
        placed = [vm.view for on_host in self.vms.values() for vm in on_host.values()]
        return rules_violated(list(self.views.values()), placed)

    def still_broken(self, vm: RebalanceVM, host: str) -> str:
        """The rules ``vm`` still breaks on ``host`` now (earlier repairs may have fixed them), or ""."""
        view = vm.view
        if view.host_affinity and host not in view.host_affinity:
            return "not in its host_affinity"
        group = view.anti_affinity_group
        if group is not None and self.groups[host][group] > 1:
            return f"anti-affinity group {group}: another VM there"
        views = list(self.views.values())
        return "; ".join(required_rules_broken_here(view, self.views[host], views, self.totals))


def _balancing(hosts: Sequence[RebalanceHost]) -> dict[str, list[RebalanceHost]]:
    """The hosts that take part, by cluster: Enabled and connected ones only."""
    clusters: dict[str, list[RebalanceHost]] = defaultdict(list)
    for host in sorted(hosts, key=lambda h: h.view.name):
        if accepts_vms(host.view.state) and host.view.connected:
            clusters[host.view.cluster].append(host)
    return dict(clusters)


def plan_rebalance(
    hosts: Sequence[RebalanceHost], vms: Sequence[RebalanceVM], settings: RebalanceSettings
) -> RebalancePlan:
    """The ordered moves that even out each cluster's load, rule repairs first.

    The same input always gives the same plan.
    """
    clusters = {
        name: _Cluster(name, members, settings.real_use_weight) for name, members in _balancing(hosts).items()
    }
    cluster_of = {host: c for c in clusters.values() for host in c.views}
    unmovable: dict[str, str] = {}
    for vm in sorted(vms, key=lambda v: v.view.name):
        host = vm.view.host
        if host is None or host not in cluster_of:
            continue
        if vm.cannot_move:
            unmovable[vm.view.name] = vm.cannot_move
        elif vm.recently_moved:
            unmovable[vm.view.name] = "moved by a rebalance recently"
        cluster_of[host].add_vm(vm, host, movable=vm.view.name not in unmovable)
    before = {name: c.load.balance() for name, c in clusters.items()}
    state = _Budget(settings)
    stuck = {v.view.name for v in vms if v.cannot_move}
    moves, unrepaired = _repairs(clusters, violations(hosts, vms), stuck, state)
    while state.total < settings.max_moves:
        steps = [_best_step(c, state, settings.min_gain) for c in clusters.values()]
        found = [s for s in steps if s is not None]
        if not found:
            break
        move = max(found, key=lambda m: (m.gain, m.cluster))
        cluster = clusters[move.cluster]
        state.record(move)
        cluster.apply(cluster.vms[move.source][move.vm], move.source, move.target)
        moves.append(move)
    after = {name: c.load.balance() for name, c in clusters.items()}
    return RebalancePlan(tuple(moves), before, after, unmovable, tuple(unrepaired))


class _Budget:
    """The moves made so far, against the limits; the VMs already moved in this plan."""

    def __init__(self, settings: RebalanceSettings) -> None:
        self.settings = settings
        self.total = 0
        self.per_cluster: dict[str, int] = defaultdict(int)
        self.per_host: dict[str, int] = defaultdict(int)
        self.moved: set[str] = set()

    def cluster_open(self, cluster: str) -> bool:
        return (
            self.total < self.settings.max_moves
            and self.per_cluster[cluster] < self.settings.max_moves_per_cluster
        )

    def host_open(self, host: str) -> bool:
        return self.per_host[host] < self.settings.max_moves_per_host

    def record(self, move: Move) -> None:
        self.total += 1
        self.per_cluster[move.cluster] += 1
        self.per_host[move.source] += 1
        self.per_host[move.target] += 1
        self.moved.add(move.vm)


def _repairs(
    clusters: Mapping[str, _Cluster], pending: list[Violation], stuck: set[str], budget: _Budget
) -> tuple[list[Move], list[str]]:
    """The repair moves, and the violations left with why. Each is checked again just before
    its repair (two VMs kept apart on one host: one move repairs both), the VMs that can move
    first. A pass that moved something looks again at every VM: a repair can make room for
    one that failed, or leave an affinity fellow alone; each VM moves at most once."""
    cluster_of = {host: c for c in clusters.values() for host in c.views}
    moves: list[Move] = []
    failed: dict[str, str] = {}
    while True:
        progressed = False
        for violation in sorted(pending, key=lambda v: (v.vm in stuck, v.vm)):
            cluster = cluster_of.get(violation.host)
            if cluster is None or violation.vm not in cluster.vms[violation.host]:
                continue
            vm = cluster.vms[violation.host][violation.vm]
            broken = cluster.still_broken(vm, violation.host)
            if not broken or violation.vm in budget.moved:
                failed.pop(violation.vm, None)
                continue
            violation = replace(violation, rule=broken)
            move = _repair(cluster, vm, violation, budget)
            if isinstance(move, str):
                failed[violation.vm] = f"{violation.vm} on {violation.host}: {violation.rule}; {move}"
            else:
                moves.append(move)
                failed.pop(violation.vm, None)
                progressed = True
        if not progressed:
            return moves, list(failed.values())
        pending = [v for c in clusters.values() for v in c.violations()]
        still = {v.vm for v in pending}
        failed = {vm: why for vm, why in failed.items() if vm in still}


def _repair(cluster: _Cluster, vm: RebalanceVM, violation: Violation, budget: _Budget) -> Move | str:
    """The move that repairs ``violation``, or why there is none."""
    if vm.cannot_move:
        return f"it cannot move: {vm.cannot_move}"
    if not budget.cluster_open(cluster.name):
        return "the plan's move limit is reached"
    source = violation.host
    views = [cluster.views[source], *(v for n, v in cluster.views.items() if n != source)]
    loads = cluster.load.loads
    # The least loaded hosts and those where its fellow members run first (a repair judges
    # every host otherwise: slow with hundreds of repairs on 500 hosts), then every host.
    together = {r.name for r in vm.view.rules if r.type is RuleType.AFFINITY}
    nearest = frozenset(
        [
            *sorted(loads, key=loads.__getitem__)[: REPAIR_TARGETS + 1],
            *(v.name for v in views if together and not together.isdisjoint(v.rule_members)),
        ]
    )
    choice = choose_host(vm.view, views, migration=True, load=loads, candidates=nearest)
    if choice.host is None and not choice.blocked and len(loads) > len(nearest):
        choice = choose_host(vm.view, views, migration=True, load=loads)
    if choice.host is None:
        return "no host can take it" if not choice.blocked else f"it cannot leave {choice.blocked}"
    target = choice.host
    changed = {source: cluster.load_after(source, vm, -1), target: cluster.load_after(target, vm, 1)}
    gain = cluster.load.imbalance() - cluster.load.imbalance_if(changed)
    before, after = cluster.load.std(), cluster.load.std_if(changed)
    move = Move(vm.view.name, source, target, cluster.name, before, after, gain, f"repair: {violation.rule}")
    budget.record(move)
    cluster.apply(vm, source, target)
    return move


def _best_step(cluster: _Cluster, budget: _Budget, min_gain: float) -> Move | None:
    """The balancing move that lowers ``cluster``'s spread most by at least ``min_gain``, or None."""
    if not budget.cluster_open(cluster.name) or len(cluster.views) < 2:
        return None
    # Ties keep the hosts' name order: the views are keyed in it and the sort is stable.
    order = sorted(cluster.views, key=cluster.load.loads.__getitem__)
    limit, moved = budget.settings.max_moves_per_host, budget.per_host
    open_hosts = [h for h in order if moved.get(h, 0) < limit]
    for width in (1, WIDENING):
        sources = open_hosts[::-1][: SOURCES_PER_STEP * width]
        targets = open_hosts[: TARGETS_PER_STEP * width]
        move = _best_among(cluster, min_gain, sources, targets)
        if move is not None:
            return move
        if len(open_hosts) <= SOURCES_PER_STEP + TARGETS_PER_STEP:
            break
    return None


def _best_among(
    cluster: _Cluster,
    min_gain: float,
    sources: list[str],
    targets: list[str],
) -> Move | None:
    load = cluster.load
    loads, total, squares, count = load.loads, load.total, load.squares, load.count
    before = load.imbalance()
    candidates: list[tuple[float, str, str, str]] = []
    # The hot loop of a large plan: the imbalance after each candidate move is worked out inline
    # from the running sums (``ClusterLoad.imbalance_if`` does the same, a few times slower).
    for source in sources:
        movable, on_source, source_load = cluster.movable[source], cluster.vms[source], loads[source]
        for target in targets:
            target_load = loads[target]
            if target == source or target_load >= source_load:
                continue
            per_use, per_vcpu, per_mib = cluster.coefficients[target]
            # The move that lowers the imbalance most takes about half the gap between the two
            # hosts: try the VMs whose leaving comes nearest to it, a few each side.
            at = bisect.bisect_left(movable, ((source_load - target_load) / 2, ""))
            for drop, name in movable[max(0, at - NEIGHBOURS) : at + NEIGHBOURS]:
                vm = on_source[name]
                rise = per_use * vm.cpu_use + per_vcpu * vm.view.cpu + per_mib * vm.view.memory_mib
                new_source, new_target = source_load - drop, target_load + rise
                new_total = total - drop + rise
                new_squares = (
                    squares
                    - source_load * source_load
                    + new_source * new_source
                    - target_load * target_load
                    + new_target * new_target
                )
                gain = before - (new_squares - new_total * new_total / count)
                if gain >= min_gain and gain > 0:
                    candidates.append((gain, name, source, target))
    candidates.sort(key=lambda c: (-c[0], c[1], c[3]))
    for gain, name, source, target in candidates:
        vm = cluster.vms[source][name]
        if cluster.fits(vm, source, target):
            changed = {source: cluster.load_after(source, vm, -1), target: cluster.load_after(target, vm, 1)}
            std_before, std_after = load.std(), load.std_if(changed)
            return Move(name, source, target, cluster.name, std_before, std_after, gain, "balance")
    return None
