"""Migrations of a busy guest (one that dirties memory faster than the link) under the
migration policy, on simulated hosts with the controllers' clock in the test's hands: without
a policy pre-copy never ends and the completion timeout aborts it; auto-converge or post-copy
after its bound bring the VM over; the progress shows the dirty rate, what is left and the
pass; the plan says which VMs are at risk; a restart during post-copy reads the outcome back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import WallClock, eventually, make_plane
from tests.maintenance.conftest import Cluster
from tests.reconciles import reconcile_log
from virtplane.domain.resources import MigrationPolicy, VirtualMachine
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store

BUSY_MIB_S = 5000.0  # the simulator's link sends 1000 MiB/s


@pytest.fixture
def clock() -> WallClock:
    return WallClock()


@pytest.fixture
async def busy(store: Store, clock: WallClock) -> AsyncIterator[Cluster]:
    """h1 with VM v0 (512 MiB), h2 and h3; a pass over its memory takes 0.05 s."""
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01, time_scale=10.0, migration_tick_s=0.01)
    plane = make_plane(store, sim=sim)
    plane.ctx.now = clock
    cluster = Cluster(plane, sim)
    plane.settings.set("migration.max_attempts", 1)
    plane.settings.set("migration.completion_timeout_per_gib_s", 5)
    await plane.start()
    await cluster.add_host("h1")
    await cluster.add_vm("v0", memory_mib=512)
    await cluster.add_host("h2")
    await cluster.add_host("h3")
    yield cluster
    await cluster.plane.stop()


def passes(cluster: Cluster) -> int:
    job = cluster.sim.migrations.latest(cluster.domain("v0"))
    return job.iteration if job is not None else 0


def set_policy(cluster: Cluster, **fields: int | bool) -> None:
    def change(vm: VirtualMachine) -> None:
        vm.spec.migration = MigrationPolicy(**fields)  # type: ignore[arg-type]

    # in the cache at once, as the maintenance route's catch-up delivers it before the request
    cluster.plane.cache.put(cluster.store.mutate(VirtualMachine, "v0", change))


async def test_without_a_policy_a_busy_guest_never_converges(busy: Cluster, clock: WallClock) -> None:
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await eventually(lambda: passes(busy) >= 20)  # a converging copy of 512 MiB needs a few
    progress = await eventually(lambda: busy.maintenance("h1").status.progress.get("v0"))
    await eventually(lambda: busy.maintenance("h1").status.progress["v0"].iteration >= 2)
    progress = busy.maintenance("h1").status.progress["v0"]
    assert progress.state == "Migrating" and progress.dirty_rate_mib_s == BUSY_MIB_S
    assert 0 < progress.remaining_mib <= 512 and not progress.post_copy
    clock.advance(6)  # past the completion timeout (5 s per GiB, at least one GiB)
    await busy.wait_state("h1", "ErrorInMaintenance")
    assert "completion timeout" in busy.maintenance("h1").status.progress["v0"].message
    assert busy.settled("v0", "h1")
    assert busy.vm("v0").status.migration_dirty_rate_mib_s == BUSY_MIB_S  # for the next plan


async def test_auto_converge_from_the_settings_brings_a_busy_guest_over(busy: Cluster) -> None:
    busy.plane.settings.set("migration.auto_converge", True)
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await busy.wait_state("h1", "Maintenance")  # the clock never moved: no timeout could end it
    assert busy.vm("v0").status.host in ("h2", "h3")
    progress = busy.maintenance("h1").status.progress["v0"]
    assert progress.state == "Migrated" and progress.iteration == 0  # nothing is measured any more


async def test_the_vms_own_policy_wins_over_the_settings(busy: Cluster, clock: WallClock) -> None:
    busy.plane.settings.set("migration.auto_converge", True)
    set_policy(busy, auto_converge=False)
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await eventually(lambda: passes(busy) >= 20)
    clock.advance(6)
    await busy.wait_state("h1", "ErrorInMaintenance")


async def test_post_copy_after_its_bound_brings_a_busy_guest_over(busy: Cluster, clock: WallClock) -> None:
    set_policy(busy, post_copy_after_s=3)
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await eventually(lambda: passes(busy) >= 10)
    assert "MigrationPostCopy" not in busy.events("VirtualMachine", "v0")  # not before its bound
    clock.advance(3)
    await busy.wait_state("h1", "Maintenance")
    assert busy.vm("v0").status.host in ("h2", "h3")
    assert "MigrationPostCopy" in busy.events("VirtualMachine", "v0")


async def test_an_abort_due_with_the_post_copy_switch_wins(busy: Cluster, clock: WallClock) -> None:
    set_policy(busy, post_copy_after_s=3)
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await eventually(lambda: passes(busy) >= 10)
    clock.advance(6)  # past the post-copy bound and the completion timeout at the same look
    await busy.wait_state("h1", "ErrorInMaintenance")
    events = busy.events("VirtualMachine", "v0")
    assert "MigrationAborting" in events and "MigrationPostCopy" not in events
    assert busy.settled("v0", "h1")


async def test_a_restart_during_post_copy_reads_the_outcome_back(
    busy: Cluster, store: Store, clock: WallClock
) -> None:
    set_policy(busy, post_copy_after_s=1, bandwidth_mib_s=20)  # 512 MiB at 20 MiB/s: ~2.5 s
    busy.sim.set_dirty_rate(busy.domain("v0"), BUSY_MIB_S)
    busy.request("h1")
    await eventually(lambda: passes(busy) >= 1)
    clock.advance(1)
    job = await eventually(
        lambda: (j := busy.sim.migrations.latest(busy.domain("v0"))) is not None and j.post_copy and j
    )
    await busy.plane.stop()  # the hypervisors go on with it
    assert job.phase == "running" and job.iteration_remaining_mib > 0  # far from done
    restarted = make_plane(store, sim=busy.sim)  # it records its reconciles
    restarted.ctx.now = clock
    clock.advance(6)  # the completion timeout passed while no control plane ran
    busy.plane = restarted
    await restarted.start()
    await busy.wait_state("h1", "Maintenance")
    assert busy.vm("v0").status.host in ("h2", "h3")
    events = busy.events("VirtualMachine", "v0")
    assert "Migrated" in events
    assert "MigrationAborting" not in events  # past the point of no return: never aborted
    followed = reconcile_log(restarted).finished[("Migration", "v0")]
    assert followed and not [o for _, o in followed if isinstance(o, BaseException)]


async def test_the_dry_run_says_which_vms_may_not_converge(busy: Cluster) -> None:
    busy.plane.settings.set("migration.bandwidth_mib_s", 400)

    async def risk_when_seen_dirtying(mib_s: float) -> str:
        def seen(vm: VirtualMachine) -> None:
            vm.status.migration_dirty_rate_mib_s = mib_s  # as its last migration measured

        written = busy.store.mutate(VirtualMachine, "v0", seen)
        version = written.metadata.resource_version
        await eventually(lambda: busy.plane.cache.vm("v0").metadata.resource_version >= version)  # type: ignore[union-attr]
        answer = busy.request("h1", dry_run=True)
        (item,) = answer["plan"]["items"]
        return str(item["risk"])

    assert await risk_when_seen_dirtying(300) == ""  # slower than its bandwidth
    risk = await risk_when_seen_dirtying(900)
    assert "may not converge" in risk and "900 MiB/s" in risk and "400 MiB/s" in risk
    set_policy(busy, auto_converge=True)
    assert await risk_when_seen_dirtying(900) == ""
