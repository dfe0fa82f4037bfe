"""Row 23: placing 10,000 VMs on 500 hosts with placement rules, one after another, as the
pure engine does it (``domain.placement.choose_host`` then ``reserve``), against a ceiling
measured in the same run: the same loop over the same fleet with no rules.

The rules are of every kind: required and preferred anti-affinity over apps (200 VMs each),
required affinity over small groups, and host rules (must, should, mustNot over zones and
disks). Each VM falls under at most three. The ratio says what the rules cost on top of
placement itself; it stays flat when the fleet grows (one look per rule of the VM and host:
never a walk over the rule's other VMs), which a quadratic engine would not.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.rows import Row, at_most
from bench.sizes import Sizes
from virtplane.domain.placement import HostView, VMView, choose_host, reserve
from virtplane.domain.placement_rules import Rule, rules_for
from virtplane.domain.resources import HostMode, HostResourceState, RuleType
from virtplane.domain.selectors import parse_label_selector

ROWS = frozenset({23})
APPS = 50
ZONES = 5
TARGET_RATIO = 3.0


def _rules() -> list[Rule]:
    def vm_rule(name: str, type: RuleType, selector: str, required: bool) -> Rule:
        return Rule(name, type, required, parse_label_selector(selector))

    def host_rule(name: str, vms: str, hosts: str, mode: HostMode) -> Rule:
        selector = parse_label_selector(hosts)
        return Rule(
            name, RuleType.HOST, mode is not HostMode.SHOULD, parse_label_selector(vms), selector, mode
        )

    rules = [vm_rule(f"apart-{k}", RuleType.ANTI_AFFINITY, f"app=app-{k}", True) for k in range(10)]
    rules += [vm_rule(f"spread-{k}", RuleType.ANTI_AFFINITY, f"app=app-{k}", False) for k in range(10, 20)]
    rules += [vm_rule(f"together-{g}", RuleType.AFFINITY, f"group=g-{g}", True) for g in range(100)]
    rules += [
        host_rule(f"zone-{k}", f"app=app-{k}", "zone in (z0,z1,z2)", HostMode.MUST) for k in range(20, 30)
    ]
    rules += [host_rule(f"ssd-{k}", f"app=app-{k}", "disk=ssd", HostMode.SHOULD) for k in range(30, 40)]
    rules += [host_rule(f"off-{k}", f"app=app-{k}", "zone=z4", HostMode.MUST_NOT) for k in range(40, 50)]
    return rules


def _fleet(sizes: Sizes, rules: list[Rule]) -> tuple[list[HostView], list[VMView]]:
    hosts = [
        HostView(
            name=f"host-{i:04d}",
            cluster="c1",
            state=HostResourceState.ENABLED,
            connected=True,
            vcpus=64,
            memory_mib=262_144,
            labels={"zone": f"z{i % ZONES}", "disk": "ssd" if i % 3 == 0 else "hdd"},
        )
        for i in range(sizes.fleet_hosts)
    ]
    vms = []
    for j in range(sizes.fleet_vms):
        labels = {"app": f"app-{j % APPS}"}
        if j % APPS >= 40 and j < 400:  # 100 groups of four kept together, among the mustNot apps
            labels["group"] = f"g-{j // 4}"
        vms.append(VMView(f"vm-{j:05d}", cpu=2, memory_mib=4096, rules=rules_for(labels, rules)))
    return hosts, vms


def place_all(hosts: list[HostView], vms: list[VMView]) -> tuple[float, int, int]:
    """CPU seconds to place every VM in turn (this process's: other work on a shared machine
    slows both loops' wall time unevenly), the VMs placed, and the preferred rules broken."""
    at = {h.name: i for i, h in enumerate(hosts)}
    fleet = list(hosts)
    placed = broken = 0
    started = time.process_time()
    for vm in vms:
        choice = choose_host(vm, fleet)
        if choice.host is None:
            continue
        index = at[choice.host]
        fleet[index] = reserve(fleet[index], vm, copy_local_disks=False)
        placed += 1
        broken += len(choice.verdicts[0].broken_preferred)
    return time.process_time() - started, placed, broken


def placement_row(sizes: Sizes) -> Row:
    rules = _rules()
    hosts, vms = _fleet(sizes, rules)
    bare = [VMView(vm.name, vm.cpu, vm.memory_mib) for vm in vms]
    ceiling_s, bare_placed, _ = place_all(hosts, bare)
    ruled_s, placed, broken = place_all(hosts, vms)
    ratio = ruled_s / ceiling_s if ceiling_s > 0 else None
    return Row(
        23,
        f"Placement with rules: {sizes.fleet_vms:,} VMs on {sizes.fleet_hosts} hosts, one by one",
        round(ruled_s, 2),
        "CPU s",
        f"<= {TARGET_RATIO:g}x the same loop without rules",
        at_most(ratio, TARGET_RATIO),
        ratio=None if ratio is None else round(ratio, 2),
        details={
            "rules": len(rules),
            "ceiling_s": round(ceiling_s, 2),
            "per_vm_ms": round(1000 * ruled_s / max(1, len(vms)), 3),
            "placed": placed,
            "placed_without_rules": bare_placed,
            "preferred_broken": broken,
        },
        note="the pure engine in process (choose_host + reserve); the ceiling is the same loop over "
        "the same fleet with no rules",
    )


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    wanted = ROWS if sizes.selected is None else sizes.selected & ROWS
    return [placement_row(sizes)] if 23 in wanted else []
