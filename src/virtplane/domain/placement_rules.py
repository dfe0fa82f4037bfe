"""Placement rules as placement reads them: which rules a VM falls under, and how a host breaks one.

A rule's VM selector is matched once per VM (``rules_for``), so a VM carries the few rules
that apply to it. For VM-VM rules each host carries how many VMs of each rule it holds
(``HostView.rule_members``, kept up to date by ``reserve``): checking a host costs one look
per rule of the VM, never a walk over the other VMs, so choosing for 10,000 VMs is linear in
them.

Affinity anchors on the rule's other VMs that stay where they are: on hosts that take VMs
(enabled, connected). Members on a host being drained or lost follow the first of them to
move, instead of pinning the group to a host that cannot take it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from virtplane.domain.resources import HostMode, PlacementRule, RuleType
from virtplane.domain.selectors import Selector, parse_label_selector

__all__ = ["Rule", "Verdict", "count_members", "judge", "rule_of", "rules_for"]


@dataclass(frozen=True)
class Rule:
    """One placement rule, its selectors parsed."""

    name: str
    type: RuleType
    required: bool
    vms: Selector
    hosts: Selector = field(default_factory=Selector)
    mode: HostMode | None = None

    @property
    def between_vms(self) -> bool:
        return self.type is not RuleType.HOST

    @property
    def label(self) -> str:
        return f"{'required' if self.required else 'preferred'} rule {self.name}"


def rule_of(resource: PlacementRule) -> Rule:
    spec = resource.spec
    return Rule(
        name=resource.metadata.name,
        type=spec.type,
        required=spec.required,
        vms=parse_label_selector(spec.vm_selector),
        hosts=parse_label_selector(spec.host_selector),
        mode=spec.mode,
    )


def rules_for(labels: Mapping[str, str], rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """The rules whose VM selector selects a VM with ``labels``, by name."""
    return tuple(sorted((r for r in rules if r.vms.matches(labels)), key=lambda r: r.name))


def count_members(
    placed: Iterable[tuple[str, Mapping[str, str]]], rules: Iterable[Rule]
) -> dict[str, dict[str, int]]:
    """Host → VM-VM rule → how many of the rule's VMs it holds, from each placed VM's (host,
    labels): one pass over the VMs (none, when there are no VM-VM rules)."""
    between = [r for r in rules if r.between_vms]
    found: dict[str, dict[str, int]] = {}
    if not between:
        return found
    for host, labels in placed:
        for rule in rules_for(labels, between):
            counts = found.setdefault(host, {})
            counts[rule.name] = counts.get(rule.name, 0) + 1
    return found


@dataclass(frozen=True)
class Verdict:
    """How one host stands with a VM's rules: the required ones it breaks, the preferred ones."""

    required: tuple[str, ...] = ()
    preferred: tuple[str, ...] = ()
    preferred_names: tuple[str, ...] = ()


NO_BREACH = Verdict()


def _breach(rule: Rule, host_labels: Mapping[str, str], others_here: int, others_anchored: int) -> str | None:
    """How a host breaks ``rule`` for a VM, or None when it keeps it."""
    if rule.type is RuleType.ANTI_AFFINITY:
        if others_here:
            return f"{others_here} other VM{'s' if others_here > 1 else ''} it keeps apart already there"
        return None
    if rule.type is RuleType.AFFINITY:
        if others_anchored and not others_here:
            return "the VMs it keeps together run on other hosts"
        return None
    on = rule.hosts.matches(host_labels)
    if rule.mode is HostMode.MUST_NOT:
        return f"the host matches {rule.hosts}" if on else None
    return None if on else f"the host does not match {rule.hosts}"


def judge(
    rules: Iterable[Rule],
    host_labels: Mapping[str, str],
    members_here: Mapping[str, int],
    anchored: Mapping[str, int],
    *,
    self_here: bool,
) -> Verdict:
    """Which of ``rules`` (a VM's) a host breaks. ``members_here``: the rules' VMs on the host;
    ``anchored``: the VM's fellow members on hosts that take VMs (the VM itself left out);
    ``self_here``: the VM itself is counted in ``members_here`` (its current host)."""
    required: list[str] = []
    preferred: list[str] = []
    names: list[str] = []
    mine = 1 if self_here else 0
    for rule in rules:
        here = members_here.get(rule.name, 0) - mine if members_here else 0
        breach = _breach(rule, host_labels, here if here > 0 else 0, anchored.get(rule.name, 0))
        if breach is None:
            continue
        if rule.required:
            required.append(f"{rule.label}: {breach}")
        else:
            preferred.append(f"{rule.label}: {breach}")
            names.append(rule.name)
    if not required and not preferred:
        return NO_BREACH
    return Verdict(tuple(required), tuple(preferred), tuple(names))


def stranded(rules: Iterable[Rule], source_members: Mapping[str, int]) -> list[str]:
    """The required Affinity rules a VM's leaving would break for the one fellow it leaves on its
    source (``source_members``: the rules' VMs there, the VM counted): that fellow would run
    apart from all the others. Moving one VM of a pair apart is a breach, whoever moves."""
    return [
        f"{rule.label}: it would leave the only other VM of the rule on its host apart from the rest"
        for rule in rules
        if rule.required and rule.type is RuleType.AFFINITY and source_members.get(rule.name, 0) - 1 == 1
    ]
