"""Placement rules in the one placement engine: table tests, and properties over random fleets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from virtplane.domain.placement import HostView, VMView, choose_host, may_run, reserve
from virtplane.domain.placement_rules import Rule, rule_of, rules_for
from virtplane.domain.resources import HostMode, HostResourceState, Metadata, PlacementRule, RuleType
from virtplane.domain.selectors import parse_label_selector


def host(name: str, **changes: object) -> HostView:
    base = HostView(
        name=name,
        cluster="c1",
        state=HostResourceState.ENABLED,
        connected=True,
        vcpus=16,
        memory_mib=16384,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def rule(name: str, type: RuleType, vms: str, *, required: bool = True, **host_part: object) -> Rule:
    hosts = parse_label_selector(str(host_part.get("hosts", "")))
    mode = host_part.get("mode")
    assert mode is None or isinstance(mode, HostMode)
    return Rule(name, type, required, parse_label_selector(vms), hosts, mode)


def vm(name: str, labels: Mapping[str, str], rules: list[Rule], **changes: object) -> VMView:
    base = VMView(name=name, cpu=1, memory_mib=1024, rules=rules_for(labels, rules))
    return replace(base, **changes)  # type: ignore[arg-type]


APART = rule("db-apart", RuleType.ANTI_AFFINITY, "app=db")
TOGETHER = rule("web-together", RuleType.AFFINITY, "app=web")
ON_SSD = rule("on-ssd", RuleType.HOST, "app=db", hosts="disk=ssd", mode=HostMode.MUST)
OFF_EDGE = rule("off-edge", RuleType.HOST, "app=db", hosts="zone=edge", mode=HostMode.MUST_NOT)
PREFER_APART = rule("db-spread", RuleType.ANTI_AFFINITY, "app=db", required=False)


def placed(h: HostView, *vms: VMView) -> HostView:
    for one in vms:
        h = reserve(h, one, copy_local_disks=False)
    return h


# ------------------------------------------------------------------ table


@pytest.mark.parametrize(
    ("rules", "labels", "fleet", "reason"),
    [
        (
            [APART],
            {"app": "db"},
            [placed(host("h"), vm("db-0", {"app": "db"}, [APART]))],
            "required rule db-apart: 1 other VM it keeps apart already there",
        ),
        (
            [TOGETHER],
            {"app": "web"},
            [host("h"), placed(host("g"), vm("web-0", {"app": "web"}, [TOGETHER]))],
            "required rule web-together: the VMs it keeps together run on other hosts",
        ),
        (
            [ON_SSD],
            {"app": "db"},
            [host("h", labels={"disk": "hdd"})],
            "required rule on-ssd: the host does not match disk=ssd",
        ),
        (
            [OFF_EDGE],
            {"app": "db"},
            [host("h", labels={"zone": "edge"})],
            "required rule off-edge: the host matches zone=edge",
        ),
    ],
)
def test_a_required_rule_excludes_a_host_by_name(
    rules: list[Rule], labels: dict[str, str], fleet: list[HostView], reason: str
) -> None:
    """Red with the rule checks left out of _rejections, or the name left out of the reason."""
    choice = choose_host(vm("new", labels, rules), fleet)
    assert choice.reasons["h"] == reason
    verdict = next(v for v in choice.verdicts if v.host == "h")
    assert reason in verdict.reasons and not verdict.feasible


def test_rules_that_do_not_select_the_vm_do_not_apply() -> None:
    fleet = [placed(host("h"), vm("db-0", {"app": "db"}, [APART]))]
    assert choose_host(vm("new", {"app": "web"}, [APART]), fleet).host == "h"


def test_every_reason_is_listed_not_only_the_first() -> None:
    """Red when _rejections stops at the first reason (the old _rejection's way)."""
    full = placed(host("h", used_memory_mib=16000, connected=False), vm("db-0", {"app": "db"}, [APART]))
    verdict = may_run(vm("new", {"app": "db"}, [APART]), "h", [full])
    assert verdict.reasons == (
        "disconnected",
        "not enough memory: -640 MiB free, 1024 needed",
        "required rule db-apart: 1 other VM it keeps apart already there",
    )


def test_affinity_does_not_anchor_on_a_host_being_drained() -> None:
    """The group's VMs on a host in maintenance follow the first to move. Red when anchors
    counts members on hosts that take no VMs."""
    draining = placed(
        host("old", state=HostResourceState.PREPARE_FOR_MAINTENANCE), vm("web-0", {"app": "web"}, [TOGETHER])
    )
    choice = choose_host(vm("new", {"app": "web"}, [TOGETHER]), [draining, host("a"), host("b")])
    assert choice.host == "a"


def test_reserve_counts_the_vm_in_its_rules() -> None:
    """Red with reserve leaving rule_members alone: the second db VM lands beside the first."""
    db = [vm(f"db-{i}", {"app": "db"}, [APART]) for i in range(2)]
    fleet = [host("a"), host("b", memory_mib=8192)]
    first = choose_host(db[0], fleet)
    assert first.host == "a"
    fleet = [reserve(h, db[0], False) if h.name == first.host else h for h in fleet]
    assert choose_host(db[1], fleet).host == "b"


def test_a_preferred_rule_ranks_instead_of_excluding() -> None:
    """Red when the broken-preferred count is not first in the rank key (a has more room)."""
    a = placed(host("a", memory_mib=65536), vm("db-0", {"app": "db"}, [PREFER_APART]))
    choice = choose_host(vm("new", {"app": "db"}, [PREFER_APART]), [a, host("b")], explain=True)
    assert choice.host == "b"
    ranked = {v.host: v for v in choice.verdicts}
    assert ranked["b"].rank == 1 and ranked["a"].rank == 2
    assert ranked["a"].broken_preferred == (
        "preferred rule db-spread: 1 other VM it keeps apart already there",
    )
    assert ranked["a"].score < ranked["b"].score


def test_a_preferred_rule_is_broken_when_no_host_keeps_it_and_the_verdict_says_so() -> None:
    """Red with _why_broken's note dropped from the chosen verdict."""
    a = placed(host("a"), vm("db-0", {"app": "db"}, [PREFER_APART]))
    choice = choose_host(vm("new", {"app": "db"}, [PREFER_APART]), [a, host("b", connected=False)])
    assert choice.host == "a"
    assert "no host that can take the VM keeps preferred rule db-spread" in choice.verdicts[0].why


def test_should_prefers_matching_hosts() -> None:
    prefer_ssd = rule("ssd", RuleType.HOST, "app=db", hosts="disk=ssd", mode=HostMode.SHOULD, required=False)
    fleet = [host("a", memory_mib=65536), host("b", labels={"disk": "ssd"})]
    assert choose_host(vm("new", {"app": "db"}, [prefer_ssd]), fleet).host == "b"


def test_an_admins_force_reports_the_required_rule_without_enforcing_it() -> None:
    """Red when override_rules still excludes the host."""
    full = placed(host("h"), vm("db-0", {"app": "db"}, [APART]))
    verdict = may_run(vm("new", {"app": "db"}, [APART]), "h", [full], override_rules=True)
    assert verdict.feasible
    assert verdict.broken_preferred == (
        "required rule db-apart: 1 other VM it keeps apart already there (forced)",
    )


def test_a_migration_judges_the_target_with_the_vm_leaving_its_source() -> None:
    db0 = vm("db-0", {"app": "db"}, [APART], host="src")
    src = placed(host("src"), db0)
    assert may_run(db0, "dst", [src, host("dst")], migration=False).feasible
    assert may_run(db0, "src", [src, host("dst")]).reasons == ("current host of the VM",)


# ------------------------------------------------------------------ the resource


def test_a_rule_resource_parses_into_its_domain_rule() -> None:
    resource = PlacementRule.model_validate(
        {
            "metadata": {"name": "db-ssd"},
            "spec": {
                "type": "Host",
                "vm_selector": "app=db",
                "host_selector": "disk in (ssd,nvme)",
                "mode": "should",
            },
        }
    )
    parsed = rule_of(resource)
    assert (parsed.name, parsed.required, str(parsed.hosts)) == ("db-ssd", False, "disk in (ssd,nvme)")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"type": "Host", "vm_selector": "app=db", "mode": "must"}, "needs mode"),
        (
            {"type": "Affinity", "vm_selector": "app=db", "mode": "must", "host_selector": "a=b"},
            "for Host rules",
        ),
        (
            {
                "type": "Host",
                "vm_selector": "a",
                "mode": "must",
                "host_selector": "a",
                "enforcement": "preferred",
            },
            "leave enforcement out",
        ),
        ({"type": "AntiAffinity", "vm_selector": "app in (db"}, "at position"),
        ({"type": "AntiAffinity", "vm_selector": ""}, "at least 1 character"),
    ],
)
def test_a_malformed_rule_is_refused_with_its_reason(spec: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem.replace("(", r"\(")):
        PlacementRule(metadata=Metadata(name="r"), spec=spec)  # type: ignore[arg-type]


# ------------------------------------------------------------------ properties

APPS = ("db", "web", "cache")
ZONES = ("a", "b", "edge")


@st.composite
def rules_strategy(draw: st.DrawFn) -> list[Rule]:
    found = []
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(list(RuleType)))
        app = draw(st.sampled_from(APPS))
        required = draw(st.booleans())
        if kind is RuleType.HOST:
            mode = draw(st.sampled_from(list(HostMode)))
            zone = draw(st.sampled_from(ZONES))
            found.append(
                rule(
                    f"r{i}",
                    kind,
                    f"app={app}",
                    required=mode is not HostMode.SHOULD,
                    hosts=f"zone={zone}",
                    mode=mode,
                )
            )
        else:
            found.append(rule(f"r{i}", kind, f"app={app}", required=required))
    return found


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Rule], list[HostView], list[tuple[str, str, str]], VMView]:
    rules = draw(rules_strategy())
    hosts = [
        host(
            f"h{i}",
            labels={"zone": draw(st.sampled_from(ZONES))},
            memory_mib=draw(st.sampled_from([2048, 4096, 8192])),
            state=draw(st.sampled_from([HostResourceState.ENABLED] * 3 + [HostResourceState.MAINTENANCE])),
        )
        for i in range(draw(st.integers(1, 6)))
    ]
    residents = []  # (vm, app, host)
    for j in range(draw(st.integers(0, 8))):
        app, index = draw(st.sampled_from(APPS)), draw(st.integers(0, len(hosts) - 1))
        resident = vm(f"v{j}", {"app": app}, rules, memory_mib=512, host=hosts[index].name)
        hosts[index] = reserve(hosts[index], resident, False)
        residents.append((resident.name, app, hosts[index].name))
    new = vm("new", {"app": draw(st.sampled_from(APPS))}, rules, memory_mib=1024)
    return rules, hosts, residents, new


def _breaks(
    r: Rule, h: HostView, app_of_new: str, residents: list[tuple[str, str, str]], takers: set[str]
) -> bool:
    """An oracle apart from the engine: does placing the new VM on ``h`` break ``r``?"""
    if str(r.vms) != f"app={app_of_new}":
        return False
    fellows = [where for _, app, where in residents if f"app={app}" == str(r.vms)]
    if r.type is RuleType.ANTI_AFFINITY:
        return h.name in fellows
    if r.type is RuleType.AFFINITY:
        anchored = [w for w in fellows if w in takers]
        return bool(anchored) and h.name not in fellows
    on = h.labels.get("zone") == str(r.hosts).split("=")[1]
    return on if r.mode is HostMode.MUST_NOT else not on


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_no_placement_breaks_a_required_rule_and_preferred_ones_only_when_nothing_else_fits(
    fleet: tuple[list[Rule], list[HostView], list[tuple[str, str, str]], VMView],
) -> None:
    """Red when the rule checks are dropped from _rejections (a required rule broken), when
    the broken-preferred count leaves the rank key (a preferred one broken needlessly), or when
    _why_broken says "no host keeps it" of a rule another feasible host keeps."""
    rules, hosts, residents, new = fleet
    app = new.rules[0].vms.requirements[0].values[0] if new.rules else "?"
    app = next((a for a in APPS if rules_for({"app": a}, rules) == new.rules), app)
    takers = {h.name for h in hosts if h.state is HostResourceState.ENABLED}
    choice = choose_host(new, hosts)

    def fits(h: HostView) -> bool:
        return (
            h.name in takers
            and h.free_memory_mib >= new.memory_mib
            and not any(r.required and _breaks(r, h, app, residents, takers) for r in rules)
        )

    def broken(h: HostView) -> set[str]:
        return {r.name for r in rules if not r.required and _breaks(r, h, app, residents, takers)}

    feasible = [h for h in hosts if fits(h)]
    assert (choice.host is None) == (not feasible)
    if choice.host is None:
        return
    chosen = next(h for h in hosts if h.name == choice.host)
    assert fits(chosen)
    assert len(broken(chosen)) == min(len(broken(h)) for h in feasible)
    verdict = choice.verdicts[0]
    assert verdict.host == chosen.name and verdict.rank == 1
    assert {b.split(":")[0].split()[-1] for b in verdict.broken_preferred} == broken(chosen)
    for name in broken(chosen):
        nobody = not any(name not in broken(h) for h in feasible)
        assert (f"no host that can take the VM keeps preferred rule {name}" in verdict.why) == nobody


def test_a_preferred_rule_broken_for_fewer_broken_ones_names_the_hosts_that_keep_it() -> None:
    """Red when _why_broken says "no host keeps it" although b keeps it (at the price of two)."""
    in_a = rule("in-a", RuleType.HOST, "app=db", hosts="zone=a", mode=HostMode.SHOULD, required=False)
    on_ssd = rule("on-ssd", RuleType.HOST, "app=db", hosts="disk=ssd", mode=HostMode.SHOULD, required=False)
    rules = [PREFER_APART, in_a, on_ssd]
    a = placed(host("a", labels={"zone": "a", "disk": "ssd"}), vm("db-0", {"app": "db"}, rules))
    choice = choose_host(vm("new", {"app": "db"}, rules), [a, host("b")])
    assert choice.host == "a"
    assert choice.verdicts[0].why.endswith("(b keep preferred rule db-spread but break more preferred rules)")


def test_a_drain_keeps_the_rules() -> None:
    """The maintenance plan judges with the same engine: the web pair lands together (the
    plan's load alone would split it), the db VM away from the other db. Red with the rule
    checks left out of _rejections, or with anchors counting the draining source."""
    from virtplane.domain.maintenance_plan import PlanAction, PlanVM, Strategy, plan_maintenance
    from virtplane.domain.resources import Capability

    rules = [APART, TOGETHER]
    migrates = frozenset({Capability.LIVE_MIGRATION})
    leaving = [
        vm(name, {"app": app}, rules, host="h0")
        for name, app in (("web-a", "web"), ("web-b", "web"), ("db-new", "db"))
    ]
    source = placed(
        host("h0", state=HostResourceState.PREPARE_FOR_MAINTENANCE, capabilities=migrates), *leaving
    )
    h1 = placed(host("h1", capabilities=migrates), vm("db-0", {"app": "db"}, rules, host="h1"))
    h2 = host("h2", capabilities=migrates)
    plan = plan_maintenance(
        "h0",
        [PlanVM(v, running=True, has_local_disks=False, migratable=True) for v in leaving],
        [source, h1, h2],
        Strategy.MIGRATION,
    )
    where = {item.vm: item.target for item in plan.items}
    assert all(item.action is PlanAction.MIGRATE for item in plan.items), plan.items
    assert where["db-new"] == "h2"
    assert where["web-a"] == where["web-b"]


@settings(max_examples=150, deadline=None)
@given(rules_strategy(), st.lists(st.sampled_from(APPS), max_size=12), st.integers(1, 5))
def test_a_fleet_placed_one_by_one_breaks_no_required_rule(
    rules: list[Rule], apps: list[str], hosts: int
) -> None:
    """Placing VM after VM with reserve (as a start does, and the bench): at the end every
    required rule holds among the placed VMs. Red with reserve not counting rule members (two
    VMs kept apart share a host), or with the rule checks dropped."""
    fleet = [host(f"h{i}", labels={"zone": ZONES[i % len(ZONES)]}) for i in range(hosts)]
    where: dict[str, tuple[str, str]] = {}  # VM → (app, host)
    for j, app in enumerate(apps):
        new = vm(f"v{j}", {"app": app}, rules)
        choice = choose_host(new, fleet)
        if choice.host is None:
            continue
        index = next(i for i, h in enumerate(fleet) if h.name == choice.host)
        fleet[index] = reserve(fleet[index], new, False)
        where[new.name] = (app, choice.host)
    labels = {h.name: h.labels for h in fleet}
    for r in (r for r in rules if r.required):
        members = [h for app, h in where.values() if str(r.vms) == f"app={app}"]
        if r.type is RuleType.ANTI_AFFINITY:
            assert len(members) == len(set(members)), (r, where)
        elif r.type is RuleType.AFFINITY:
            assert len(set(members)) <= 1, (r, where)
        else:
            zone = str(r.hosts).split("=")[1]
            on = [labels[h].get("zone") == zone for h in members]
            assert all(on) if r.mode is HostMode.MUST else not any(on), (r, where)


def test_a_vm_not_counted_on_its_host_does_not_cancel_an_anchor_elsewhere() -> None:
    """A view whose own host does not count it (a caller's views built without it): its fellow
    on b still anchors it. Red without anchors' max(0, ...) (the -1 on a cancels b's member)."""
    a = host("a", rule_members={"other": 1})
    b = placed(host("b", memory_mib=4096), vm("web-0", {"app": "web"}, [TOGETHER]))
    web = vm("web-1", {"app": "web"}, [TOGETHER], host="a")
    choice = choose_host(web, [a, b, host("c")])
    assert choice.host == "b"
    assert choice.reasons["c"] == "required rule web-together: the VMs it keeps together run on other hosts"
