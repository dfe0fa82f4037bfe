"""The maintenance plan of DESIGN.md §5.3: what happens to each VM before anything moves.

``plan_maintenance`` decides, per VM on the host (§5.2):

- a stopped VM is left alone (LEAVE);
- a running, migratable VM whose disks are all shared is live-migrated (MIGRATE)
  to the host ``choose_host`` picks, or BLOCKED with every host's reason;
- a running VM with a local disk, or one whose live_migration_policy is Never,
  follows the local-storage strategy: Error → BLOCKED, Migration → block
  migration (MIGRATE_WITH_STORAGE; BLOCKED if it may not be migrated or no host
  has room), ForceStop → FORCE_STOP, Stop → STOP.

Targets are chosen so that every target's inbound migration slot has work: each VM
goes to the target with the least to receive so far (the MiB of memory and copied
disks already planned for it), then the one with the most free memory. VMs are
planned most constrained first (fewest possible targets), then largest first, then
by name: a VM only one host can take gets it before a VM that could go anywhere
fills it (the demo's drain sent a free VM and one anti-affinity kept to host-1 both
there, and host-2 sat idle), and big moves are spread before the small ones even
out the rest. The same input always gives the same plan; the items are listed
largest memory first, then by name. Each chosen target is reserved before the next
VM is planned, so two VMs never over-commit one host or land together on a host
against their anti-affinity group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import assert_never

from virtplane.domain.placement import Choice, HostView, VMView, choose_host, reserve, why_no_target
from virtplane.domain.progress import RETRIED_AFRESH, PlanAction
from virtplane.domain.resources import (
    HostMaintenanceStatus,
    MaintenancePhase,
    MaintenancePlanItem,
    MaintenanceStrategy,
)

__all__ = [
    "Plan",
    "PlanAction",
    "PlanItem",
    "PlanVM",
    "Strategy",
    "plan_items",
    "plan_maintenance",
    "restart_status",
]


Strategy = MaintenanceStrategy
"""The setting host.maintenance.local.storage.strategy: what to do with VMs that can't live-migrate."""


@dataclass(frozen=True)
class PlanVM:
    """A VM on the host under maintenance, as the planner sees it."""

    vm: VMView
    running: bool
    has_local_disks: bool
    """Any disk on a local pool; must agree with ``vm.local_disks_gib``."""
    migratable: bool
    """False when its live_migration_policy is Never."""
    convergence_risk: str = ""
    """Why its live migration may never converge (``migration_policy.convergence_risk``); "" if none."""

    def __post_init__(self) -> None:
        if self.has_local_disks != bool(self.vm.local_disks_gib):
            raise ValueError(
                f"VM {self.vm.name}: has_local_disks is {self.has_local_disks} "
                f"but local_disks_gib is {dict(self.vm.local_disks_gib)}"
            )


@dataclass(frozen=True)
class PlanItem:
    vm: str
    action: PlanAction
    target: str | None
    """The destination of MIGRATE and MIGRATE_WITH_STORAGE; None otherwise."""
    reason: str
    risk: str = ""
    """What may go wrong with the move, said before it starts: a migration that may not converge."""


@dataclass(frozen=True)
class Plan:
    host: str
    strategy: Strategy
    items: tuple[PlanItem, ...]

    @property
    def blocked(self) -> tuple[PlanItem, ...]:
        """The items that keep the host from reaching Maintenance."""
        return tuple(item for item in self.items if item.action == PlanAction.BLOCKED)

    @property
    def feasible(self) -> bool:
        return not self.blocked


def _why_not_live(planned: PlanVM) -> str:
    """Why a running VM can't simply be live-migrated, e.g. 'local storage'."""
    causes: list[str] = []
    if planned.has_local_disks:
        causes.append("local storage")
    if not planned.migratable:
        causes.append("live_migration_policy Never")
    return ", ".join(causes)


def plan_maintenance(
    host: str,
    vms: Sequence[PlanVM],
    hosts: Sequence[HostView],
    strategy: Strategy,
    *,
    exclude_targets: frozenset[str] = frozenset(),
) -> Plan:
    """The plan for draining ``host`` of ``vms`` onto ``hosts`` under ``strategy``.

    ``hosts`` may include ``host`` itself; it is never a target. ``exclude_targets``
    names further hosts not to use (e.g. ones a migration already failed to).
    """
    strategy = Strategy(strategy)  # a plain string from a setting compares by value, never by identity
    # The host under maintenance is never a target, only the source whose driver must be able
    # to migrate (choose_host leaves it out of the reasons).
    targets = {h.name: h for h in hosts if h.name != host}
    sources = [h for h in hosts if h.name == host]
    items: list[PlanItem] = []
    receiving: dict[str, float] = {}  # target → MiB planned to arrive there

    def choose(planned: PlanVM, copy_local_disks: bool) -> Choice:
        return choose_host(
            replace(planned.vm, host=host),  # it leaves this host, whatever the view says
            [*sources, *targets.values()],
            exclude=exclude_targets,
            copy_local_disks=copy_local_disks,
            migration=True,
            load=receiving,
        )

    def place(planned: PlanVM, action: PlanAction, copy_local_disks: bool, reason: str) -> PlanItem:
        choice = choose(planned, copy_local_disks)
        if choice.host is None:
            return PlanItem(planned.vm.name, PlanAction.BLOCKED, None, why_no_target(choice))
        targets[choice.host] = reserve(targets[choice.host], planned.vm, copy_local_disks)
        receiving[choice.host] = receiving.get(choice.host, 0.0) + _transfer_mib(planned, copy_local_disks)
        return PlanItem(planned.vm.name, action, choice.host, reason, planned.convergence_risk)

    def possible_targets(planned: PlanVM) -> int:
        if not planned.running or not planned.migratable:
            return 0  # not migrated: its order does not matter
        if planned.has_local_disks and strategy is not Strategy.MIGRATION:
            return 0
        choice = choose(planned, planned.has_local_disks)
        return sum(1 for name in targets if name not in choice.reasons and not choice.blocked)

    order = sorted(vms, key=lambda p: (possible_targets(p), -p.vm.memory_mib, p.vm.name))
    for planned in order:
        name = planned.vm.name
        if not planned.running:
            items.append(PlanItem(name, PlanAction.LEAVE, None, "not running"))
        elif planned.migratable and not planned.has_local_disks:
            items.append(place(planned, PlanAction.MIGRATE, False, "disks on shared storage: live migration"))
        else:
            why = f"{_why_not_live(planned)} and strategy {strategy.value}"
            match strategy:
                case Strategy.ERROR:
                    items.append(PlanItem(name, PlanAction.BLOCKED, None, why))
                case Strategy.MIGRATION if not planned.migratable:
                    items.append(PlanItem(name, PlanAction.BLOCKED, None, f"{why}: it may not be migrated"))
                case Strategy.MIGRATION:
                    items.append(
                        place(planned, PlanAction.MIGRATE_WITH_STORAGE, True, f"{why}: block migration")
                    )
                case Strategy.FORCE_STOP:
                    items.append(PlanItem(name, PlanAction.FORCE_STOP, None, why))
                case Strategy.STOP:
                    items.append(PlanItem(name, PlanAction.STOP, None, why))
                case _:
                    assert_never(strategy)
    memory = {p.vm.name: p.vm.memory_mib for p in vms}
    items.sort(key=lambda item: (-memory[item.vm], item.vm))
    return Plan(host=host, strategy=strategy, items=tuple(items))


def plan_items(plan: Plan) -> list[MaintenancePlanItem]:
    """The plan as ``HostMaintenance.status.plan`` stores it."""
    return [
        MaintenancePlanItem(vm=i.vm, action=i.action, target=i.target, reason=i.reason, risk=i.risk)
        for i in plan.items
    ]


def restart_status(status: HostMaintenanceStatus, plan: Plan, now: datetime) -> HostMaintenanceStatus:
    """The status a new or repeated request drains from: a retry of a failed drain keeps what it
    did (the VMs that failed or were blocked start afresh); anything else starts over."""
    if status.phase is MaintenancePhase.FAILED:
        new = status.model_copy(deep=True)
        new.progress = {vm: p for vm, p in new.progress.items() if p.state not in RETRIED_AFRESH}
    else:
        new = HostMaintenanceStatus(observed_generation=status.observed_generation)
    new.phase = MaintenancePhase.DRAINING
    new.strategy = plan.strategy
    new.plan = plan_items(plan)
    new.blocking = []
    new.finished_at = None
    new.started_at = new.started_at or now
    new.message = f"plan: {len(plan.items)} VM(s), strategy {plan.strategy.value}"
    return new


def _transfer_mib(planned: PlanVM, copy_local_disks: bool) -> float:
    """What a migration of ``planned`` sends: its memory, and its local disks when they are copied."""
    disks = sum(planned.vm.local_disks_gib.values()) * 1024 if copy_local_disks else 0
    return float(planned.vm.memory_mib + disks)
