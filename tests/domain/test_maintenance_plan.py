"""The maintenance plan (DESIGN.md §5.2, §5.3): per-VM actions, capacity, anti-affinity, states."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.domain.maintenance_plan import (
    Plan,
    PlanAction,
    PlanItem,
    PlanVM,
    Strategy,
    plan_maintenance,
)
from virtplane.domain.placement import HostView, VMView
from virtplane.domain.resources import Capability
from virtplane.domain.resources import HostResourceState as S

A = PlanAction
SOURCE = "h0"
MIGRATES = frozenset({Capability.LIVE_MIGRATION, Capability.BLOCK_MIGRATION})


def host(name: str, **changes: object) -> HostView:
    base = HostView(
        name=name,
        cluster="c1",
        state=S.ENABLED,
        connected=True,
        vcpus=16,
        memory_mib=16384,
        shared_pools=frozenset({"pool-a"}),
        local_pool_free_gib={"local": 100},
        capabilities=MIGRATES,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def source() -> HostView:
    return host(SOURCE, state=S.PREPARE_FOR_MAINTENANCE)


def planned(
    name: str,
    *,
    running: bool = True,
    local_gib: int = 0,
    migratable: bool = True,
    memory_mib: int = 1024,
    group: str | None = None,
) -> PlanVM:
    the_vm = VMView(
        name=name,
        cpu=1,
        memory_mib=memory_mib,
        host=SOURCE,
        shared_pools=frozenset({"pool-a"}),
        local_disks_gib={"local": local_gib} if local_gib else {},
        anti_affinity_group=group,
    )
    return PlanVM(vm=the_vm, running=running, has_local_disks=bool(local_gib), migratable=migratable)


KINDS: dict[str, PlanVM] = {
    "stopped-shared": planned("vm", running=False),
    "stopped-local": planned("vm", running=False, local_gib=10),
    "running-shared": planned("vm"),
    "running-shared-never": planned("vm", migratable=False),
    "running-local": planned("vm", local_gib=10),
    "running-local-never": planned("vm", local_gib=10, migratable=False),
}

# kind → strategy → (action, target, reason); written out by hand from §5.2.
EXPECTED: dict[str, dict[Strategy, tuple[PlanAction, str | None, str]]] = {
    "stopped-shared": {s: (A.LEAVE, None, "not running") for s in Strategy},
    "stopped-local": {s: (A.LEAVE, None, "not running") for s in Strategy},
    "running-shared": {s: (A.MIGRATE, "t1", "disks on shared storage: live migration") for s in Strategy},
    "running-shared-never": {
        Strategy.ERROR: (A.BLOCKED, None, "live_migration_policy Never and strategy Error"),
        Strategy.MIGRATION: (
            A.BLOCKED,
            None,
            "live_migration_policy Never and strategy Migration: it may not be migrated",
        ),
        Strategy.FORCE_STOP: (A.FORCE_STOP, None, "live_migration_policy Never and strategy ForceStop"),
        Strategy.STOP: (A.STOP, None, "live_migration_policy Never and strategy Stop"),
    },
    "running-local": {
        Strategy.ERROR: (A.BLOCKED, None, "local storage and strategy Error"),
        Strategy.MIGRATION: (
            A.MIGRATE_WITH_STORAGE,
            "t1",
            "local storage and strategy Migration: block migration",
        ),
        Strategy.FORCE_STOP: (A.FORCE_STOP, None, "local storage and strategy ForceStop"),
        Strategy.STOP: (A.STOP, None, "local storage and strategy Stop"),
    },
    "running-local-never": {
        Strategy.ERROR: (A.BLOCKED, None, "local storage, live_migration_policy Never and strategy Error"),
        Strategy.MIGRATION: (
            A.BLOCKED,
            None,
            "local storage, live_migration_policy Never and strategy Migration: it may not be migrated",
        ),
        Strategy.FORCE_STOP: (
            A.FORCE_STOP,
            None,
            "local storage, live_migration_policy Never and strategy ForceStop",
        ),
        Strategy.STOP: (A.STOP, None, "local storage, live_migration_policy Never and strategy Stop"),
    },
}

CASES = [(kind, strategy) for kind in KINDS for strategy in Strategy]


@pytest.mark.parametrize(("kind", "strategy"), CASES, ids=[f"{k}-{s.value}" for k, s in CASES])
def test_action_per_strategy_and_vm_kind(kind: str, strategy: Strategy) -> None:
    plan = plan_maintenance(SOURCE, [KINDS[kind]], [source(), host("t1")], strategy)
    action, target, reason = EXPECTED[kind][strategy]
    assert plan == Plan(SOURCE, strategy, (PlanItem("vm", action, target, reason),))
    assert plan.feasible is (action is not A.BLOCKED)


TEST_DRIVER = frozenset({Capability.MEMORY_SNAPSHOT, Capability.DISK_SNAPSHOT})  # libvirt test:///
LIVE_ONLY = frozenset({Capability.LIVE_MIGRATION})


@pytest.mark.parametrize(
    ("source_caps", "target_caps", "kind", "expected"),
    [
        (TEST_DRIVER, MIGRATES, "running-shared", "cannot leave host h0: its driver cannot live-migrate"),
        (
            TEST_DRIVER,
            MIGRATES,
            "running-local",
            "cannot leave host h0: its driver cannot migrate local disks (no block migration)",
        ),
        (MIGRATES, TEST_DRIVER, "running-shared", "no target host: t1: its driver cannot live-migrate"),
        (
            MIGRATES,
            LIVE_ONLY,
            "running-local",
            "no target host: t1: its driver cannot migrate local disks (no block migration)",
        ),
        (LIVE_ONLY, MIGRATES, "running-shared", None),
        (
            LIVE_ONLY,
            MIGRATES,
            "running-local",
            "cannot leave host h0: its driver cannot migrate local disks (no block migration)",
        ),
    ],
)
def test_a_migration_the_drivers_cannot_do_is_blocked_with_the_reason(
    source_caps: frozenset[Capability], target_caps: frozenset[Capability], kind: str, expected: str | None
) -> None:
    hosts = [source(), host("t1", capabilities=target_caps)]
    hosts[0] = replace(hosts[0], capabilities=source_caps)
    plan = plan_maintenance(SOURCE, [KINDS[kind]], hosts, Strategy.MIGRATION)
    [item] = plan.items
    if expected is None:
        assert (item.action, item.target) == (A.MIGRATE, "t1")
    else:
        assert item == PlanItem("vm", A.BLOCKED, None, expected)
        assert not plan.feasible
    # Stopping needs no migration: the same hosts drain by stopping
    assert plan_maintenance(SOURCE, [KINDS["running-local"]], hosts, Strategy.STOP).feasible


def test_strategy_values_are_the_setting_values() -> None:
    assert [s.value for s in Strategy] == ["Error", "Migration", "ForceStop", "Stop"]
    assert [a.value for a in PlanAction] == [
        "Migrate",
        "MigrateWithStorage",
        "Stop",
        "ForceStop",
        "Leave",
        "Blocked",
    ]


def test_strategy_given_as_a_plain_string() -> None:
    plan = plan_maintenance(SOURCE, [KINDS["running-local"]], [host("t1")], "Migration")  # type: ignore[arg-type]
    assert plan.strategy is Strategy.MIGRATION
    assert plan.items[0].action is A.MIGRATE_WITH_STORAGE
    with pytest.raises(ValueError, match="'Sometimes' is not a valid MaintenanceStrategy"):
        plan_maintenance(SOURCE, [], [], "Sometimes")  # type: ignore[arg-type]


def test_memory_is_reserved_as_vms_are_placed() -> None:
    vms = [
        planned("small", memory_mib=1500),
        planned("big", memory_mib=3000),
        planned("mid", memory_mib=2000),
    ]
    hosts = [host("a", memory_mib=4096), host("b", memory_mib=3000)]
    plan = plan_maintenance(SOURCE, vms, hosts, Strategy.ERROR)
    assert plan.items == (
        PlanItem("big", A.MIGRATE, "a", "disks on shared storage: live migration"),
        PlanItem("mid", A.MIGRATE, "b", "disks on shared storage: live migration"),
        PlanItem(
            "small",
            A.BLOCKED,
            None,
            "no target host: a: not enough memory: 1096 MiB free, 1500 needed; "
            "b: not enough memory: 1000 MiB free, 1500 needed",
        ),
    )
    assert not plan.feasible
    assert [item.vm for item in plan.blocked] == ["small"]


def test_vcpus_are_reserved_as_vms_are_placed() -> None:
    vms = [planned(f"vm{i}") for i in range(3)]
    plan = plan_maintenance(SOURCE, vms, [host("a", vcpus=2)], Strategy.ERROR)
    assert [(i.vm, i.action, i.target) for i in plan.items] == [
        ("vm0", A.MIGRATE, "a"),
        ("vm1", A.MIGRATE, "a"),
        ("vm2", A.BLOCKED, None),
    ]
    assert plan.items[2].reason == "no target host: a: not enough vCPUs: 0 free, 1 needed"


def test_local_pool_room_is_reserved_for_block_migration() -> None:
    vms = [planned("one", local_gib=20), planned("two", local_gib=20)]
    hosts = [host("a", local_pool_free_gib={"local": 30}), host("b", local_pool_free_gib={})]
    plan = plan_maintenance(SOURCE, vms, hosts, Strategy.MIGRATION)
    assert [(i.vm, i.action, i.target) for i in plan.items] == [
        ("one", A.MIGRATE_WITH_STORAGE, "a"),
        ("two", A.BLOCKED, None),
    ]
    assert plan.items[1].reason == (
        "no target host: a: no local pool local with 20 GiB free; b: no local pool local with 20 GiB free"
    )


def test_anti_affinity_counts_earlier_placements() -> None:
    vms = [planned("db1", group="db"), planned("db2", group="db"), planned("web", group="web")]
    hosts = [host("a"), host("b", anti_affinity_groups=frozenset({"db"}))]
    plan = plan_maintenance(SOURCE, vms, hosts, Strategy.ERROR)
    assert [(i.vm, i.action, i.target) for i in plan.items] == [
        ("db1", A.MIGRATE, "a"),
        ("db2", A.BLOCKED, None),
        ("web", A.MIGRATE, "b"),  # db1's reservation left a with less free memory than b
    ]
    assert plan.items[1].reason == (
        "no target host: a: anti-affinity group db already there; b: anti-affinity group db already there"
    )


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (host("t", state=S.DISABLED), "disabled"),
        (host("t", state=S.PREPARE_FOR_MAINTENANCE), "in PrepareForMaintenance"),
        (host("t", state=S.ERROR_IN_PREPARE_FOR_MAINTENANCE), "in ErrorInPrepareForMaintenance"),
        (host("t", state=S.MAINTENANCE), "in Maintenance"),
        (host("t", state=S.ERROR_IN_MAINTENANCE), "in ErrorInMaintenance"),
        (host("t", connected=False), "disconnected"),
        (host("t", shared_pools=frozenset()), "shared pool pool-a not attached"),
    ],
)
def test_only_enabled_connected_reachable_hosts_are_targets(target: HostView, reason: str) -> None:
    plan = plan_maintenance(SOURCE, [planned("vm")], [source(), target], Strategy.ERROR)
    assert plan.items == (PlanItem("vm", A.BLOCKED, None, f"no target host: t: {reason}"),)


def test_excluded_targets_are_not_used() -> None:
    plan = plan_maintenance(
        SOURCE, [planned("vm")], [host("a"), host("b")], Strategy.ERROR, exclude_targets=frozenset({"a"})
    )
    assert plan.items == (PlanItem("vm", A.MIGRATE, "b", "disks on shared storage: live migration"),)


def test_the_host_under_maintenance_is_never_a_target() -> None:
    # Even Enabled with plenty of room, and even when the VM doesn't say where it runs.
    the_vm = replace(planned("vm"), vm=replace(planned("vm").vm, host=None))
    plan = plan_maintenance(SOURCE, [the_vm], [host(SOURCE)], Strategy.MIGRATION)
    assert plan.items == (PlanItem("vm", A.BLOCKED, None, "no target host: there are no other hosts"),)


def test_items_are_ordered_largest_memory_first_then_name() -> None:
    vms = [
        planned("b", memory_mib=512, running=False),
        planned("a", memory_mib=512),
        planned("c", memory_mib=2048, running=False),
        planned("d", memory_mib=1024),
    ]
    plan = plan_maintenance(SOURCE, vms, [host("t1")], Strategy.ERROR)
    assert [i.vm for i in plan.items] == ["c", "d", "a", "b"]


def test_empty_host_gives_an_empty_feasible_plan() -> None:
    plan = plan_maintenance(SOURCE, [], [host("t1")], Strategy.ERROR)
    assert plan == Plan(SOURCE, Strategy.ERROR, ())
    assert plan.feasible
    assert plan.blocked == ()


def test_plan_vm_refuses_inconsistent_local_disks() -> None:
    the_vm = VMView(name="vm", cpu=1, memory_mib=64, local_disks_gib={"local": 5})
    with pytest.raises(ValueError, match="VM vm: has_local_disks is False"):
        PlanVM(vm=the_vm, running=True, has_local_disks=False, migratable=True)
    with pytest.raises(ValueError, match="has_local_disks is True"):
        PlanVM(vm=replace(the_vm, local_disks_gib={}), running=True, has_local_disks=True, migratable=True)


_fleet_vms = st.lists(
    st.builds(
        planned,
        name=st.text("abcdef", min_size=1, max_size=4),
        running=st.booleans(),
        local_gib=st.sampled_from([0, 10, 40]),
        migratable=st.booleans(),
        memory_mib=st.sampled_from([512, 1024, 4096]),
        group=st.sampled_from([None, "db", "web"]),
    ),
    max_size=12,
    unique_by=lambda p: p.vm.name,
)
_fleet_hosts = st.lists(
    st.builds(
        host,
        name=st.sampled_from(["a", "b", "c", "d", SOURCE]),
        memory_mib=st.sampled_from([2048, 8192]),
        vcpus=st.integers(1, 4),
        state=st.sampled_from([S.ENABLED, S.ENABLED, S.DISABLED, S.MAINTENANCE]),
        local_pool_free_gib=st.sampled_from([{}, {"local": 50}]),
    ),
    max_size=5,
    unique_by=lambda h: h.name,
)


@given(_fleet_vms, _fleet_hosts, st.sampled_from(list(Strategy)), st.randoms(use_true_random=False))
def test_plans_are_reproducible_and_never_overcommit(
    vms: list[PlanVM], hosts: list[HostView], strategy: Strategy, rng: random.Random
) -> None:
    plan = plan_maintenance(SOURCE, vms, hosts, strategy)
    shuffled_vms, shuffled_hosts = list(vms), list(hosts)
    rng.shuffle(shuffled_vms)
    rng.shuffle(shuffled_hosts)
    assert plan_maintenance(SOURCE, shuffled_vms, shuffled_hosts, strategy) == plan

    by_name = {h.name: h for h in hosts}
    sizes = {p.vm.name: p for p in vms}
    assert sorted(i.vm for i in plan.items) == sorted(sizes)
    load: dict[str, list[PlanVM]] = {}
    for item in plan.items:
        moves = item.action in (A.MIGRATE, A.MIGRATE_WITH_STORAGE)
        assert (item.target is not None) is moves
        if item.target is not None:
            assert item.target != SOURCE
            assert by_name[item.target].state is S.ENABLED
            load.setdefault(item.target, []).append(sizes[item.vm])
    for name, placed in load.items():
        target = by_name[name]
        assert sum(p.vm.memory_mib for p in placed) <= target.free_memory_mib
        assert sum(p.vm.cpu for p in placed) <= target.free_vcpus
        groups = [p.vm.anti_affinity_group for p in placed if p.vm.anti_affinity_group]
        assert len(groups) == len(set(groups))
        copied = sum(p.vm.local_disks_gib.get("local", 0) for p in placed if p.has_local_disks)
        assert copied <= target.local_pool_free_gib.get("local", 0)


def _targets(plan: Plan) -> list[tuple[str, str | None]]:
    return [(item.vm, item.target) for item in plan.items]


@pytest.mark.parametrize(
    ("vms", "hosts", "targets"),
    [
        pytest.param(
            # The demo's drain of host-3: web-1 may only go to host-1 (web-2 runs on host-2), db-1
            # to either. Sent where the most memory was free, both went to host-1, and web-1 waited
            # for host-1's one inbound slot while host-2's sat idle.
            [planned("db-1", memory_mib=8192, local_gib=20), planned("web-1", memory_mib=2048, group="web")],
            [
                source(),
                host("host-1", memory_mib=32768),
                host(
                    "host-2", memory_mib=32768, used_memory_mib=6144, anti_affinity_groups=frozenset({"web"})
                ),
            ],
            [("db-1", "host-2"), ("web-1", "host-1")],
            id="demo: the constrained VM first, the free one to the other host",
        ),
        pytest.param(
            # One roomy target and one small one: the roomy one must not take everything.
            [planned(f"vm{i}", memory_mib=m) for i, m in enumerate([2048, 1024, 1024, 512, 512, 512, 512])],
            [host("big", memory_mib=65536), host("small", memory_mib=8192)],
            [
                ("vm0", "big"),
                ("vm1", "small"),
                ("vm2", "small"),
                ("vm3", "big"),
                ("vm4", "small"),
                ("vm5", "big"),
                ("vm6", "small"),
            ],
            id="migrations spread by what each target has to receive, not by free memory",
        ),
        pytest.param(
            # Room still decides: what does not fit the small target goes to the big one.
            [planned(f"vm{i}", memory_mib=3000) for i in range(3)],
            [host("big", memory_mib=65536), host("small", memory_mib=4096)],
            [("vm0", "big"), ("vm1", "small"), ("vm2", "big")],
            id="balanced as far as room allows",
        ),
    ],
)
def test_targets_keep_every_inbound_slot_busy(
    vms: list[PlanVM], hosts: list[HostView], targets: list[tuple[str, str]]
) -> None:
    assert _targets(plan_maintenance(SOURCE, vms, hosts, Strategy.MIGRATION)) == targets
