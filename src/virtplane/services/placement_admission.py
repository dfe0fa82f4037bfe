"""Admission of a migration by hand against the placement rules (``Admission`` calls it).

Admission imports no controller, so it judges the rules alone (the room, pools and drivers
are the Migrate operation's own checks when it runs) with the domain's rule functions.
"""

from __future__ import annotations

from virtplane.domain.errors import Refused
from virtplane.domain.host_states import accepts_vms
from virtplane.domain.placement_rules import count_members, judge, rule_of, rules_for
from virtplane.domain.resources import (
    HostConnection,
    OperationType,
    PlacementRule,
    VirtualMachine,
    VirtualMachineOperation,
)
from virtplane.runtime.cache import Cache

__all__ = ["refuse_rule_breaking_move"]


def refuse_rule_breaking_move(cache: Cache, op: VirtualMachineOperation, vm: VirtualMachine) -> None:
    """A migration by hand to a host that breaks a required placement rule is refused, the
    rule named; an admin's force (the API refuses an operator's) lets it through."""
    target = op.spec.migrate.target_host if op.spec.migrate else None
    if target is None or op.spec.force or op.spec.type is not OperationType.MIGRATE:
        return
    rules = rules_for(vm.metadata.labels, [rule_of(r) for r in cache.objects(PlacementRule)])
    host = cache.host(target)
    if not rules or host is None:
        return  # no rule, or no such host: the operation fails with NoTarget as before
    others = (
        (other.status.host, other.metadata.labels)
        for other in cache.vms()
        if other.status.host and other.metadata.name != vm.metadata.name
    )
    members = count_members(others, rules)
    taking = {
        h.metadata.name
        for h in cache.hosts()
        if accepts_vms(h.status.resource_state) and h.status.connection is HostConnection.UP
    }
    anchored = {r.name: sum(n.get(r.name, 0) for h, n in members.items() if h in taking) for r in rules}
    verdict = judge(rules, host.metadata.labels, members.get(target, {}), anchored, self_here=False)
    if verdict.required:
        raise Refused(
            "PlacementRule",
            f"VM {vm.metadata.name} may not move to {target}: {'; '.join(verdict.required)} "
            "(an admin may force it: --force)",
        )
