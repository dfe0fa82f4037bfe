"""Choosing a host for a VM: one pure engine over snapshots of hosts and the VM, that explains.

``choose_host`` judges every host (``HostVerdict``): excluded, with every reason (its state,
drivers, CPU, cluster, pools, networks, room, the VM's built-in rules — ``host_affinity``,
``anti_affinity_group`` — and the required placement rules it breaks, by name), or feasible
and ranked. The rank: fewest preferred rules broken, then the least ``load`` (a caller that
spreads work rather than room — the maintenance plan — passes it), then the least real CPU
use (``real_use``), then the most free memory after placement, then the lowest name, so the
choice is reproducible. A preferred rule is thus broken only when every host that could take
the VM and keeps it breaks more preferred rules, and the chosen host's verdict says so.
``Choice.reasons`` keeps each excluded host's first reason (in the order of ``_rejections``).

Local pools: a local pool lives on one host, so ``HostView.local_pool_free_gib``
and ``VMView.local_disks_gib`` are keyed by the pool's name as the hosts know it.
Without ``copy_local_disks`` the VM's disks stay where they are, so the target
must be the host that has those pools (a start on the disks' host). With it the
disks are copied (block migration), so the target needs a pool of the same name
with room for them.

Migration: with ``migration=True`` the VM moves live from its current host, so that
host and the target must both have drivers that can do it (``migration_refusal``).

CPU (``cpu_refusal``): a host that takes no guests (broken KVM, refused) takes none; a
host-passthrough VM needs a KVM host, and moves live only to a host with the identical CPU;
any VM moves live only between hosts of the same accelerator (a kvm domain cannot resume
under TCG). Cluster-mode VMs use their cluster's CPU model, which every host of it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from virtplane.domain.host_states import accepts_vms
from virtplane.domain.placement_rules import judge, stranded
from virtplane.domain.placement_views import HostView, VMView, allocatable
from virtplane.domain.resources import Capability, HostResourceState

__all__ = [
    "Choice",
    "HostVerdict",
    "HostView",
    "VMView",
    "allocatable",
    "anchors",
    "choose_host",
    "cpu_refusal",
    "explain",
    "may_run",
    "migration_refusal",
    "release",
    "reserve",
]


REAL_USE_STEP = 0.1
"""Real CPU use within a tenth of each other is the same for placement."""


@dataclass(frozen=True)
class HostVerdict:
    """One host's verdict for a VM: excluded (``reasons``), or feasible and ranked."""

    host: str
    reasons: tuple[str, ...] = ()
    """Every reason it cannot take the VM; empty: it can."""
    broken_preferred: tuple[str, ...] = ()
    """The preferred rules it breaks (and, with ``override_rules``, the required ones)."""
    rank: int = 0
    """1 for the chosen host, 2 for the next...; 0 when excluded."""
    score: float = 0.0
    """Its free memory share after placement (0 to 1) minus one per preferred rule it breaks."""
    why: str = ""
    """Why it ranks where it does, in words."""

    @property
    def feasible(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class Choice:
    """The chosen host, or None, and why each rejected host was rejected."""

    host: str | None
    reasons: Mapping[str, str]
    """Rejected host name → the reason; hosts that could take the VM are absent."""
    blocked: str = ""
    """Why no host was considered: the VM's own host cannot let it go ("host h1: its driver ..."), or ""."""
    verdicts: tuple[HostVerdict, ...] = field(default=(), compare=False)
    """The chosen host first, then (``explain``) the other ranked ones, then the excluded by name."""


def migration_refusal(host: HostView, copy_local_disks: bool) -> str | None:
    """Why ``host``'s driver cannot take part in a live migration, as source or target, or None."""
    if copy_local_disks and Capability.BLOCK_MIGRATION not in host.capabilities:
        return "its driver cannot migrate local disks (no block migration)"
    if not copy_local_disks and Capability.LIVE_MIGRATION not in host.capabilities:
        return "its driver cannot live-migrate"
    return None


def cpu_refusal(vm: VMView, host: HostView, source: HostView | None) -> str | None:
    """Why ``host`` cannot run ``vm``'s CPU, or take it live from ``source``, or None."""
    if not host.takes_guests:
        return "takes no guests: its KVM is not usable (condition Accelerator)"
    if vm.cpu_passthrough and host.accelerator != "kvm":
        return f"cpu_mode host-passthrough needs KVM; it runs guests under {host.accelerator or 'an unknown accelerator'}"
    if source is None:
        return None
    if source.accelerator and host.accelerator and host.accelerator != source.accelerator:
        return (
            f"runs guests under {host.accelerator}, the VM runs under {source.accelerator} on {source.name}"
        )
    if vm.cpu_passthrough and host.cpu_signature != source.cpu_signature:
        return f"cpu_mode host-passthrough: its CPU is not identical to {source.name}'s"
    return None


def anchors(vm: VMView, hosts: Sequence[HostView]) -> dict[str, int]:
    """Per VM-VM rule of ``vm``: its other VMs on hosts that take VMs (where affinity anchors)."""
    names = [r.name for r in vm.rules if r.between_vms]
    if not names:
        return {}
    found = dict.fromkeys(names, 0)
    for host in hosts:
        if not host.rule_members or not (accepts_vms(host.state) and host.connected):
            continue
        mine = 1 if host.name == vm.host else 0  # the VM itself, where it runs, is no anchor
        for name in names:
            found[name] += max(0, host.rule_members.get(name, 0) - mine)
    return found


def _rejections(
    vm: VMView,
    host: HostView,
    exclude: frozenset[str],
    copy_local_disks: bool,
    migration: bool,
    source: HostView | None,
    anchored: Mapping[str, int],
    override_rules: bool = False,
    every: bool = True,
) -> tuple[list[str], list[str]]:
    """Every reason ``host`` can't take ``vm``, and the preferred rules it breaks (without
    ``every``, a host excluded already is not judged by the rules too: placing, not explaining)."""
    if host.name == vm.host:
        return ["current host of the VM"], []
    reasons: list[str] = []
    if host.name in exclude:
        reasons.append("excluded")
    if not accepts_vms(host.state):
        reasons.append("disabled" if host.state == HostResourceState.DISABLED else f"in {host.state.value}")
    if not host.connected:
        reasons.append("disconnected")
    refusal = migration_refusal(host, copy_local_disks) if migration else None
    if refusal is not None:
        reasons.append(refusal)
    refusal = cpu_refusal(vm, host, source if migration else None)
    if refusal is not None:
        reasons.append(refusal)
    if vm.cluster is not None and host.cluster != vm.cluster:
        reasons.append(f"in cluster {host.cluster}, VM needs cluster {vm.cluster}")
    if vm.host_affinity and host.name not in vm.host_affinity:
        reasons.append("not in host_affinity")
    if not vm.shared_pools <= host.shared_pools:
        reasons += [f"shared pool {p} not attached" for p in sorted(vm.shared_pools - host.shared_pools)]
    if not vm.networks <= host.networks:
        reasons += [f"network {n} is not on this host" for n in sorted(vm.networks - host.networks)]
    if host.free_vcpus < vm.cpu:
        reasons.append(f"not enough vCPUs: {host.free_vcpus} free, {vm.cpu} needed")
    if host.free_memory_mib < vm.memory_mib:
        reasons.append(f"not enough memory: {host.free_memory_mib} MiB free, {vm.memory_mib} needed")
    for pool, gib in sorted(vm.local_disks_gib.items()):
        free = host.local_pool_free_gib.get(pool)
        if copy_local_disks and (free is None or free < gib):
            reasons.append(f"no local pool {pool} with {gib} GiB free")
        if not copy_local_disks and free is None:
            reasons.append(f"local pool {pool} is not on this host")
    if vm.anti_affinity_group is not None and vm.anti_affinity_group in host.anti_affinity_groups:
        reasons.append(f"anti-affinity group {vm.anti_affinity_group} already there")
    if not vm.rules or (reasons and not every):
        return reasons, []
    verdict = judge(vm.rules, host.labels, host.rule_members, anchored, self_here=False)
    required = list(verdict.required)
    if migration and source is not None and accepts_vms(source.state) and source.connected:
        required += stranded(vm.rules, source.rule_members)
    if override_rules:  # an admin's forced move: required rules are reported, not enforced
        return reasons, [*(f"{r} (forced)" for r in required), *verdict.preferred]
    return reasons + required, list(verdict.preferred)


def _rejection(
    vm: VMView,
    host: HostView,
    exclude: frozenset[str],
    copy_local_disks: bool,
    migration: bool,
    source: HostView | None = None,
    anchored: Mapping[str, int] | None = None,
) -> str | None:
    """Why ``host`` can't take ``vm`` (the first rule it fails), or None if it can.

    ``anchored`` (``anchors`` over the fleet) lets required affinity count; without it only
    the other rules do. ``may_run`` gives every reason and needs no such argument."""
    reasons, _ = _rejections(vm, host, exclude, copy_local_disks, migration, source, anchored or {})
    return reasons[0] if reasons else None


def _rank_words(broken: Sequence[str], load: float, free_after: int) -> str:
    kept = "keeps every preferred rule" if not broken else f"breaks {'; '.join(broken)}"
    loaded = f", load {load:g}" if load else ""
    return f"{kept}{loaded}, {free_after} MiB free after"


def choose_host(
    vm: VMView,
    hosts: Sequence[HostView],
    *,
    exclude: frozenset[str] = frozenset(),
    copy_local_disks: bool = False,
    migration: bool = False,
    load: Mapping[str, float] | None = None,
    real_use: Mapping[str, float] | None = None,
    candidates: frozenset[str] | None = None,
    override_rules: bool = False,
    explain: bool = False,
) -> Choice:
    """The best host for ``vm`` among ``hosts``, and the hosts' verdicts: the chosen one's and
    the excluded ones' always, every ranked host's and every reason of each with ``explain``.

    Only Enabled, connected hosts are candidates; the VM's current host and the
    ``exclude``d ones never are; with ``candidates``, only those are judged (the others
    still count for the rules: where the VM's fellow members run). With ``migration`` the VM
    moves live from its current host, which is then the source rather than a rejected
    candidate: when it (if among ``hosts``) cannot let the VM go, no host is considered and
    ``Choice.blocked`` says why. ``override_rules``: an admin's forced move, which required
    placement rules do not stop (the verdict still names them).
    """
    source = None
    anchored = anchors(vm, hosts)
    if migration:
        source = next((h for h in hosts if h.name == vm.host), None)
        refusal = migration_refusal(source, copy_local_disks) if source is not None else None
        if refusal is not None:
            return Choice(host=None, reasons=MappingProxyType({}), blocked=f"host {vm.host}: {refusal}")
        hosts = [h for h in hosts if h.name != vm.host]
    if candidates is not None:
        hosts = [h for h in hosts if h.name in candidates]
    load = load or {}
    used = real_use or {}
    reasons: dict[str, str] = {}
    excluded: list[HostVerdict] = []
    feasible: list[tuple[tuple[int, float, int, int, str], HostView, list[str]]] = []
    for host in hosts:
        rejected, broken = _rejections(
            vm, host, exclude, copy_local_disks, migration, source, anchored, override_rules, explain
        )
        if rejected:
            reasons[host.name] = rejected[0]
            excluded.append(HostVerdict(host.name, tuple(rejected)))
            continue
        key = (
            len(broken),
            load.get(host.name, 0.0),
            round(used.get(host.name, 0.0) / REAL_USE_STEP),
            -(host.free_memory_mib - vm.memory_mib),
            host.name,
        )
        feasible.append((key, host, broken))
    if explain:
        ordered = sorted(feasible, key=lambda item: item[0])
    else:  # placing: only the best is ranked (10,000 VMs placed in turn)
        ordered = [min(feasible, key=lambda item: item[0])] if feasible else []
    ranked = [
        HostVerdict(
            host.name,
            broken_preferred=tuple(broken),
            rank=rank,
            score=_score(host, vm, len(broken)),
            why=_rank_words(broken, load.get(host.name, 0.0), host.free_memory_mib - vm.memory_mib),
        )
        for rank, (_, host, broken) in enumerate(ordered, start=1)
    ]
    if ranked and ranked[0].broken_preferred:
        others = [(host.name, broken) for _, host, broken in feasible]
        ranked[0] = replace(ranked[0], why=ranked[0].why + _why_broken(ranked[0].broken_preferred, others))
    return Choice(
        host=ranked[0].host if ranked else None,
        reasons=MappingProxyType(reasons),
        verdicts=(*ranked, *sorted(excluded, key=lambda v: v.host)),
    )


def _score(host: HostView, vm: VMView, broken: int) -> float:
    room = host.allocatable_memory_mib
    share = (host.free_memory_mib - vm.memory_mib) / room if room > 0 else 0.0
    return round(share - broken, 3)


def _why_broken(broken_preferred: Sequence[str], feasible: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Why the chosen host breaks its preferred rules: no feasible host keeps each, or the
    ones that do (``feasible``: each host and what it breaks) break more."""
    notes = []
    for broken in broken_preferred:
        rule = broken.split(":")[0]  # "preferred rule NAME"; the words after it differ per host
        keepers = sorted(name for name, its in feasible if not any(b.split(":")[0] == rule for b in its))
        if not keepers:
            notes.append(f"no host that can take the VM keeps {rule}")
        else:
            notes.append(f"{', '.join(keepers[:3])} keep {rule} but break more preferred rules")
    return " (" + "; ".join(notes) + ")"


def may_run(
    vm: VMView,
    host: str,
    hosts: Sequence[HostView],
    *,
    copy_local_disks: bool = False,
    migration: bool = False,
    override_rules: bool = False,
) -> HostVerdict:
    """May ``vm`` run on ``host`` (one of ``hosts``, the whole fleet) — and why not: every
    reason, placement rules included, and the preferred rules it would break."""
    choice = choose_host(
        vm,
        hosts,
        copy_local_disks=copy_local_disks,
        migration=migration,
        candidates=frozenset({host, *([vm.host] if migration and vm.host else [])}),
        override_rules=override_rules,
        explain=True,
    )
    if choice.blocked:
        return HostVerdict(host, (f"the VM cannot leave {choice.blocked}",))
    found = next((v for v in choice.verdicts if v.host == host), None)
    return found if found is not None else HostVerdict(host, ("no such host",))


def reserve(host: HostView, vm: VMView, copy_local_disks: bool) -> HostView:
    """``host`` with ``vm``'s resources added, so later choices see them taken.

    It does not check that they fit (``choose_host`` does). With
    ``copy_local_disks`` the VM's local disks take room in the host's pools of
    the same names; a missing pool is a ``ValueError``. The VM counts as a member of its
    VM-VM rules there.
    """
    local = dict(host.local_pool_free_gib)
    if copy_local_disks:
        for pool, gib in vm.local_disks_gib.items():
            if pool not in local:
                raise ValueError(f"host {host.name} has no local pool {pool} for VM {vm.name}")
            local[pool] -= gib
    groups = host.anti_affinity_groups
    if vm.anti_affinity_group is not None:
        groups = groups | {vm.anti_affinity_group}
    members = dict(host.rule_members)
    for rule in vm.rules:
        if rule.between_vms:
            members[rule.name] = members.get(rule.name, 0) + 1
    return replace(
        host,
        used_vcpus=host.used_vcpus + vm.cpu,
        used_memory_mib=host.used_memory_mib + vm.memory_mib,
        local_pool_free_gib=local,
        anti_affinity_groups=groups,
        rule_members=members,
    )


def release(host: HostView, vm: VMView, *, last_of_group: bool = True) -> HostView:
    """``host`` with ``vm``'s resources given back: the inverse of ``reserve`` (shared disks).

    The VM no longer counts as a member of its VM-VM rules there. A host knows only which
    anti-affinity groups it holds, not how many of each: ``last_of_group`` says whether the
    VM was its group's last VM there (the caller counts), so the group leaves with it.
    """
    groups = host.anti_affinity_groups
    if vm.anti_affinity_group is not None and last_of_group:
        groups = groups - {vm.anti_affinity_group}
    members = dict(host.rule_members)
    for rule in vm.rules:
        if rule.between_vms and rule.name in members:
            members[rule.name] -= 1
            if members[rule.name] <= 0:
                del members[rule.name]
    return replace(
        host,
        used_vcpus=max(0, host.used_vcpus - vm.cpu),
        used_memory_mib=max(0, host.used_memory_mib - vm.memory_mib),
        anti_affinity_groups=groups,
        rule_members=members,
    )


def why_no_target(choice: Choice) -> str:
    """Why a VM that must move has nowhere to go (a maintenance plan, a drain, a migration)."""
    if choice.blocked:
        return f"cannot leave {choice.blocked}"
    if not choice.reasons:
        return "no target host: there are no other hosts"
    details = "; ".join(f"{name}: {reason}" for name, reason in sorted(choice.reasons.items()))
    return f"no target host: {details}"


def explain(choice: Choice) -> str:
    """One line: the chosen host, or why no host fits."""
    if choice.blocked:
        return f"no host: the VM cannot leave {choice.blocked}"
    if choice.host is not None:
        rejected = len(choice.reasons)
        if not rejected:
            return f"host {choice.host}"
        return f"host {choice.host} ({rejected} other host{'s' if rejected > 1 else ''} rejected)"
    if not choice.reasons:
        return "no host: there are no hosts"
    return "no host: " + "; ".join(f"{name}: {reason}" for name, reason in sorted(choice.reasons.items()))
