"""Rule repair for the rebalancer: the VMs that break a rule where they run now.

Pure. A VM comes to break a rule it was placed under when a rule is added later, or after a
recovery that had no choice. The rules are the VM spec's own (its ``anti_affinity_group``,
its ``host_affinity``) and the required placement rules, judged by the placement engine on
the VM's current host: there the VM counts in its host's ``rule_members`` (``self_here``),
and its fellow members elsewhere anchor its affinity rules (``anchors`` leaves the VM out).

Preferred rules are not repaired: breaking one is allowed when placement had to, and a
move made for it would be a move the balance did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from virtplane.domain.host_states import accepts_vms
from virtplane.domain.placement import HostView, VMView, anchors
from virtplane.domain.placement_rules import judge

__all__ = ["Violation", "fellows", "member_totals", "required_rules_broken_here", "violations"]


@dataclass(frozen=True)
class Violation:
    vm: str
    host: str
    rule: str
    """The rules it breaks there, in words, each named ("required rule NAME: why")."""


def required_rules_broken_here(
    vm: VMView, host: HostView, hosts: Sequence[HostView], totals: Mapping[str, int] | None = None
) -> tuple[str, ...]:
    """The required placement rules ``vm`` breaks on ``host``, where it runs and is counted
    in ``host.rule_members``; ``hosts``: the fleet, for where its fellow members run.

    ``totals`` (``member_totals`` of ``hosts``) spares a walk over the hosts per VM."""
    if not vm.rules:
        return ()
    if totals is None:
        anchored = anchors(vm, hosts)
    else:  # the VM itself is among the totals when its host takes VMs
        anchored = fellows(vm, totals, counted=accepts_vms(host.state) and host.connected)
    return judge(vm.rules, host.labels, host.rule_members, anchored, self_here=True).required


def fellows(vm: VMView, totals: Mapping[str, int], *, counted: bool = True) -> dict[str, int]:
    """Per VM-VM rule of ``vm``: its other VMs where affinity anchors, from ``member_totals``
    (``counted``: the VM itself is among them), as ``anchors`` finds them host by host."""
    mine = 1 if counted else 0
    return {r.name: max(0, totals.get(r.name, 0) - mine) for r in vm.rules if r.between_vms}


def member_totals(hosts: Sequence[HostView]) -> dict[str, int]:
    """VM-VM rule → its VMs on hosts that take VMs (where affinity anchors), over ``hosts``."""
    totals: dict[str, int] = {}
    for host in hosts:
        if host.rule_members and accepts_vms(host.state) and host.connected:
            for name, count in host.rule_members.items():
                totals[name] = totals.get(name, 0) + count
    return totals


def violations(views: Sequence[HostView], placed: Sequence[VMView]) -> list[Violation]:
    """The VMs (``placed``) that break a rule where they run now (``views``), in name order.

    Anti-affinity groups: every VM of a group after the first, by name, on one host. Placement
    rules: every VM that breaks one (two VMs kept apart on one host both do: the planner
    re-checks each before moving it, so only one moves).
    """
    by_name = {v.name: v for v in views}
    totals = member_totals(views)
    found: list[Violation] = []
    seen_groups: set[tuple[str, str]] = set()
    for vm in sorted(placed, key=lambda v: v.name):
        host = by_name.get(vm.host) if vm.host is not None else None
        if host is None:
            continue
        if vm.host_affinity and host.name not in vm.host_affinity:
            found.append(Violation(vm.name, host.name, "not in its host_affinity"))
            continue
        group = vm.anti_affinity_group
        if group is not None:
            if (host.name, group) in seen_groups:
                found.append(Violation(vm.name, host.name, f"anti-affinity group {group}: another VM there"))
                continue
            seen_groups.add((host.name, group))
        broken = required_rules_broken_here(vm, host, views, totals)
        if broken:
            found.append(Violation(vm.name, host.name, "; ".join(broken)))
    return found
