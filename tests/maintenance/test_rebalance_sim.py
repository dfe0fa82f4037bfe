"""Rebalancing on a control plane of simulated hosts (issue 37): skewed guest load, the
rebalancer's looks, the moves as live migrations, no ping-pong, the pause and the limits.

Two clocks, both the test's: the simulator's and the usage collector's run ``offset`` seconds
ahead of the wall (a round of collection is 10 s of it; boots and migrations still take their
real few milliseconds), and the rebalancer's own ``now`` (the hold and the hourly limit),
moved by hand. Each look is ``Rebalancer.run_once``, as the leader's loop calls it.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.conftest import eventually, make_plane
from tests.maintenance.conftest import Cluster
from virtplane.domain.resources import (
    Host,
    LiveMigrationPolicy,
    Metadata,
    PlacementRule,
    PlacementRuleSpec,
    RuleType,
    VirtualMachine,
)
from virtplane.drivers.sim import SimCloud, SimLoad
from virtplane.store.store import Store

CLUSTER = "default"


class Clocks:
    def __init__(self) -> None:
        self.offset = 0.0
        self.rebalancer = datetime(2026, 12, 1, tzinfo=UTC)

    def sim(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


async def start(store: Store, clocks: Clocks, *idle: str) -> Cluster:
    """Four busy single-vCPU guests all on h1 of 8 CPUs (placed before the ``idle`` hosts came)."""
    sim = SimCloud(
        boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01, clock=clocks.sim
    )
    plane = make_plane(store, sim=sim)
    plane.usage_collector.wall_clock = clocks.sim
    plane.rebalancer.now = lambda: clocks.rebalancer
    cluster = Cluster(plane, sim)
    await plane.start()
    await cluster.add_host("h1", vcpus=8, memory_mib=16384)
    for i in range(4):
        await cluster.add_vm(f"busy-{i}")
        sim.set_load(cluster.domain(f"busy-{i}"), SimLoad(cpu=1.0))
    for host in idle:
        await cluster.add_host(host, vcpus=8, memory_mib=16384)
    for key, value in {
        "rebalance.mode": "automatic",
        "rebalance.real_use_weight": 1.0,
        "rebalance.min_gain": 0.001,
        "rebalance.max_moves_per_host": 4,
    }.items():
        plane.settings.set(key, value, cluster=CLUSTER)
    await collect(cluster, clocks)
    return cluster


@pytest.fixture
async def skewed(store: Store, clocks: Clocks) -> AsyncIterator[Cluster]:
    """h1 with the four busy guests, h2 and h3 idle."""
    cluster = await start(store, clocks, "h2", "h3")
    yield cluster
    await cluster.plane.stop()


async def collect(cluster: Cluster, clocks: Clocks, rounds: int = 2) -> None:
    for _ in range(rounds):
        clocks.offset += 10
        await cluster.plane.usage_collector.collect_once()


def where(cluster: Cluster) -> dict[str, str | None]:
    return {f"busy-{i}": cluster.vm(f"busy-{i}").status.host for i in range(4)}


async def settle(cluster: Cluster, clocks: Clocks, moved: list[str]) -> None:
    await eventually(lambda: all(cluster.settled(vm, str(cluster.vm(vm).status.host)) for vm in moved))
    await collect(cluster, clocks)  # the load as it is after the moves


async def test_skewed_load_is_evened_out_by_live_migrations_that_never_ping_pong(
    skewed: Cluster, clocks: Clocks
) -> None:
    rebalancer = skewed.plane.rebalancer
    before = rebalancer.plan(CLUSTER).before[CLUSTER]
    assert before.hosts["h1"] == pytest.approx(0.5, abs=0.02) and before.hosts["h2"] < 0.02
    started: list[str] = []
    for _ in range(6):  # looks an interval apart: the first moves, the later ones find it balanced
        looks = await rebalancer.run_once()
        started += looks[0].started
        await settle(skewed, clocks, looks[0].started)
        clocks.rebalancer += timedelta(minutes=5)
    assert len(started) == 2, started  # h1 keeps two, h2 and h3 take one each
    assert Counter(where(skewed).values()) == {"h1": 2, "h2": 1, "h3": 1}
    after = rebalancer.plan(CLUSTER).before[CLUSTER]
    assert after.std < before.std / 2
    for vm in started:  # as live migrations, by the rebalancer, each said
        reasons = skewed.events("VirtualMachine", vm)
        assert "RebalanceMove" in reasons and "MigrationStarted" in reasons
        assert skewed.runs_on(vm) == [skewed.vm(vm).status.host]
    assert "Rebalancing" in skewed.events("Cluster", CLUSTER)
    # Past the hold too, nothing moves back: the minimum gain holds them where they are.
    clocks.rebalancer += timedelta(hours=2)
    assert (await rebalancer.run_once())[0].started == []


async def test_automatic_mode_pauses_while_a_host_is_in_maintenance(skewed: Cluster, clocks: Clocks) -> None:
    skewed.request("h3")
    await skewed.wait_state("h3", "Maintenance")
    look = (await skewed.plane.rebalancer.run_once())[0]
    assert look.plan.moves and look.started == []
    assert look.paused == "host h3 is Maintenance"
    clocks.rebalancer += timedelta(minutes=5)
    again = (await skewed.plane.rebalancer.run_once())[0]
    assert again.paused and again.started == []
    assert skewed.events("Cluster", CLUSTER).count("RebalancePaused") == 1  # said once, not each look


async def test_plan_mode_moves_nothing_and_the_hourly_limit_holds(skewed: Cluster, clocks: Clocks) -> None:
    settings, rebalancer = skewed.plane.settings, skewed.plane.rebalancer
    settings.set("rebalance.mode", "plan", cluster=CLUSTER)
    look = (await rebalancer.run_once())[0]
    assert len(look.plan.moves) == 2 and look.started == []
    assert Counter(where(skewed).values()) == {"h1": 4}
    settings.set("rebalance.mode", "automatic", cluster=CLUSTER)
    settings.set("rebalance.max_moves_per_hour", 1, cluster=CLUSTER)
    first = (await rebalancer.run_once())[0]
    assert len(first.started) == 1
    await settle(skewed, clocks, first.started)
    clocks.rebalancer += timedelta(minutes=30)
    second = (await rebalancer.run_once())[0]
    assert second.started == [] and "max_moves_per_hour" in next(iter(second.waiting.values()))
    clocks.rebalancer += timedelta(minutes=31)
    assert len((await rebalancer.run_once())[0].started) == 1


async def call(cluster: Cluster, method: str, path: str, role: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=cluster.plane.app())  # no lifespan: the plane runs
    token = cluster.store.create_token(f"t-{uuid.uuid4().hex[:8]}", role)
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
        return await client.request(method, path, headers={"Authorization": f"Bearer {token}"})


async def test_the_api_shows_the_balance_plans_and_carries_out(skewed: Cluster, clocks: Clocks) -> None:
    skewed.plane.settings.set("rebalance.mode", "off", cluster=CLUSTER)
    shown = (await call(skewed, "GET", f"/v1/clusters/{CLUSTER}/rebalance", "viewer")).json()
    assert shown["mode"] == "off" and shown["balance"]["hosts"]["h1"] == pytest.approx(0.5, abs=0.02)
    assert len(shown["plan"]["moves"]) == 2 and shown["last"] is None
    assert (await call(skewed, "GET", "/v1/clusters/nowhere/rebalance", "viewer")).status_code == 404
    denied = await call(skewed, "POST", f"/v1/clusters/{CLUSTER}/rebalance?dryRun=true", "operator")
    assert denied.status_code == 403
    dry = await call(skewed, "POST", f"/v1/clusters/{CLUSTER}/rebalance?dryRun=true", "admin")
    assert dry.status_code == 200 and len(dry.json()["plan"]["moves"]) == 2
    assert Counter(where(skewed).values()) == {"h1": 4}
    done = (await call(skewed, "POST", f"/v1/clusters/{CLUSTER}/rebalance", "admin")).json()
    assert len(done["started"]) == 2
    await settle(skewed, clocks, done["started"])
    assert Counter(where(skewed).values()) == {"h1": 2, "h2": 1, "h3": 1}
    assert skewed.store.get(Host, "h1").spec.cluster == CLUSTER


async def test_a_vm_moved_recently_stays_until_the_hold_ends(store: Store, clocks: Clocks) -> None:
    cluster = await start(store, clocks, "h2")
    try:
        rebalancer = cluster.plane.rebalancer
        moved: list[str] = []
        for _ in range(3):  # one migration out of h1 at a time (migration.max_outbound_per_host)
            started = (await rebalancer.run_once())[0].started
            await settle(cluster, clocks, started)
            moved += started
            clocks.rebalancer += timedelta(minutes=5)
        assert len(moved) == 2  # two of four to h2
        # h3 comes, and the moved guests are the busy ones: the best moves would take one of them
        # on to h3 or back to h1, which the hold (rebalance.hold_s, an hour) forbids for now.
        await cluster.add_host("h3", vcpus=8, memory_mib=16384)
        for vm, host in where(cluster).items():
            cluster.sim.set_load(cluster.domain(vm), SimLoad(cpu=1.0 if host == "h2" else 0.0))
        await collect(cluster, clocks)
        clocks.rebalancer += timedelta(minutes=30)
        held = (await rebalancer.run_once())[0]
        assert held.started == [] and held.plan.moves == ()
        assert {held.plan.unmovable[vm] for vm in moved} == {"moved by a rebalance recently"}
        clocks.rebalancer += timedelta(minutes=31)
        assert len((await rebalancer.run_once())[0].started) == 1
    finally:
        await cluster.plane.stop()


async def test_a_vm_that_may_not_live_migrate_is_never_planned(skewed: Cluster, clocks: Clocks) -> None:
    def never(vm: VirtualMachine) -> None:
        vm.spec.live_migration_policy = LiveMigrationPolicy.NEVER

    for i in range(3):
        skewed.store.mutate(VirtualMachine, f"busy-{i}", never)
    await eventually(
        lambda: skewed.plane.cache.vm("busy-2").spec.live_migration_policy is LiveMigrationPolicy.NEVER
    )
    local = await skewed.add_vm("local-disk", pool="h1-local")
    assert local.status.host == "h1"
    skewed.sim.set_load(skewed.domain("local-disk"), SimLoad(cpu=1.0))
    await collect(skewed, clocks)
    plan = skewed.plane.rebalancer.plan(CLUSTER)
    assert [m.vm for m in plan.moves] == ["busy-3"]
    assert plan.unmovable == {
        "busy-0": "live_migration_policy Never",
        "busy-1": "live_migration_policy Never",
        "busy-2": "live_migration_policy Never",
        "local-disk": "local disks: rebalancing copies no disks",
    }


async def test_a_rule_added_while_two_of_its_vms_share_a_host_is_repaired_first(
    skewed: Cluster, clocks: Clocks
) -> None:
    """busy-0 and busy-1 share h1 when a required anti-affinity rule over them is added: in
    plan mode the first move repairs it, named; in automatic mode it is done as a live
    migration and the two run apart. Red with violations blind to placement rules (the plan
    starts with a balancing move, and may keep the two together)."""
    store, plane = skewed.store, skewed.plane
    plane.settings.set("rebalance.mode", "plan", cluster=CLUSTER)

    def label(vm: VirtualMachine) -> None:
        vm.metadata.labels = {**vm.metadata.labels, "app": "db"}

    for name in ("busy-0", "busy-1"):
        store.mutate(VirtualMachine, name, label)
    store.create(
        PlacementRule(
            metadata=Metadata(name="db-apart"),
            spec=PlacementRuleSpec(type=RuleType.ANTI_AFFINITY, vm_selector="app=db"),
        )
    )
    await eventually(
        lambda: (
            plane.cache.vm("busy-1").metadata.labels.get("app") == "db"
            and any(r.metadata.name == "db-apart" for r in plane.cache.objects(PlacementRule))
        )
    )
    reason = "repair: required rule db-apart: 1 other VM it keeps apart already there"
    look = (await plane.rebalancer.run_once())[0]
    first = look.plan.moves[0]
    assert (first.vm, first.source, first.reason) == ("busy-0", "h1", reason)
    assert look.started == [] and Counter(where(skewed).values()) == {"h1": 4}
    shown = (await call(skewed, "GET", f"/v1/clusters/{CLUSTER}/rebalance", "viewer")).json()
    assert shown["plan"]["moves"][0]["reason"] == reason

    plane.settings.set("rebalance.mode", "automatic", cluster=CLUSTER)
    clocks.rebalancer += timedelta(minutes=5)
    started = (await plane.rebalancer.run_once())[0].started
    assert "busy-0" in started
    await settle(skewed, clocks, started)
    placed = where(skewed)
    assert placed["busy-0"] != placed["busy-1"]
    events = skewed.events("VirtualMachine", "busy-0")
    assert "RebalanceMove" in events and "MigrationStarted" in events
    assert skewed.runs_on("busy-0") == [placed["busy-0"]]
    assert not any(m.reason.startswith("repair") for m in plane.rebalancer.plan(CLUSTER).moves)
