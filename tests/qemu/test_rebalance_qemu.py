"""Rebalancing on real libvirt daemons (issue 37): four guests on host a, b empty; the plan
proposes two live migrations to b and ``POST /v1/clusters/default/rebalance`` carries them out.

Allocation only (``real_use_weight`` 0): what TCG guests really use is not the test's. Each
daemon is asked where each domain runs; the moved ones went by live migration (its events).
"""

from __future__ import annotations

import pytest

from tests.conftest import eventually
from virtplane.domain.resources import Host, RunPolicy, VMPhase

from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

GUESTS = ("r1", "r2", "r3", "r4")


async def test_two_proposed_moves_are_carried_out_as_live_migrations(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_host("b", enabled=False)  # every guest starts on a
    for name in GUESTS:
        await qplane.add_volume(f"{name}-root")
        qplane.add_vm(name, RunPolicy.ALWAYS_ON, f"{name}-root")
    for name in GUESTS:
        await qplane.wait_settled(name, VMPhase.RUNNING)
        assert qplane.vm(name).status.host == "a"
    qplane.store.mutate(Host, "b", lambda h: setattr(h.spec, "enabled", True))
    await eventually(lambda: qplane.host_state("b") == "Enabled", timeout=LIMIT_S)
    settings = qplane.plane.settings
    settings.set("rebalance.real_use_weight", 0.0, cluster="default")
    settings.set("rebalance.min_gain", 0.0, cluster="default")
    settings.set("rebalance.max_moves_per_host", 4, cluster="default")
    moved: list[str] = []
    async with qplane.api() as api:
        planned = await api.post("/v1/clusters/default/rebalance?dryRun=true")
        assert planned.status_code == 200, planned.text
        moves = planned.json()["plan"]["moves"]
        assert [(m["source"], m["target"]) for m in moves] == [("a", "b"), ("a", "b")]
        for _ in range(3):  # one migration out of a at a time (migration.max_outbound_per_host)
            done = await api.post("/v1/clusters/default/rebalance")
            assert done.status_code == 200, done.text
            started = done.json()["started"]
            moved += started
            for name in started:
                await eventually(lambda n=name: qplane.settled(n, VMPhase.RUNNING), timeout=LIMIT_S)  # type: ignore[misc]
            if len(moved) == 2:
                break
    assert len(moved) == 2
    for name in GUESTS:
        where = "b" if name in moved else "a"
        assert qplane.vm(name).status.host == where and await qplane.runs_on(name) == [where]
        if name in moved:  # by the rebalancer, live (the migration's own events), no failure
            reasons = [reason for reason, _ in qplane.events(name)]
            assert {"RebalanceMove", "MigrationStarted", "Migrated"} <= set(reasons), reasons
            assert "MigrationFailed" not in reasons
