"""The crash harness with policy-driven backups (issue 36): a BackupPolicy fires every 5 s
(croniter's seconds field); the server is SIGKILLed at the policy's durable point
(its window and VMs stored, no backup made) or at a policy backup's own (planned, begun), then
restarted on the same data (the simulator's state file keeps the host's jobs and checkpoints).

Invariants after the restart: the policy's windows go on (two more backups end good); no
backup is counted good that is not complete (each Succeeded one copied all it had to, and the
policy's count is the Succeeded records'); no backup failed (its Failed event) or was made
twice for one window; and once the policy is gone and its last backup ended, the domain holds
one checkpoint, the newest good backup's (none orphaned).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess
from tests.crash.test_kill_restart import post
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimCloud

EVERY_5_S = "* * * * * */5"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


def policy_backups(server: ServerProcess) -> list[dict[str, Any]]:
    with server.client() as c:
        found = c.get("/v1/backups", params={"labelSelector": "virtplane.io/backup-policy=nightly"})
    items: list[dict[str, Any]] = found.json()["items"]
    return items


async def checkpoints(sim: SimCloud, domain: str) -> tuple[str, ...]:
    driver = sim.driver("sim://h1")
    await driver.connect()
    return await driver.checkpoints(domain)


@pytest.mark.parametrize("point", ["backuppolicy.window", "backup.planned", "backup.begun"])
def test_policy_backups_killed_at_their_durable_points_go_on_good(server: ServerProcess, point: str) -> None:
    server.start()
    with server.client() as c:
        post(c, "/v1/hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        post(c, "/v1/storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 100}})  # fmt: skip
        post(c, "/v1/volumes", {"metadata": {"name": "a-root"}, "spec": {"pool": "shared", "size_gib": 1}})
        post(c, "/v1/vms", {"metadata": {"name": "a", "labels": {"backup": "yes"}}, "spec": {"disks": [{"volume": "a-root"}]}})  # fmt: skip
        post(c, "/v1/backuptargets", {"metadata": {"name": "t"}, "spec": {"path": "/srv/backups", "capacity_gib": 10}})  # fmt: skip
    server.wait_for("/v1/vms/a", lambda v: v["status"]["phase"] == "Running")
    server.stop()

    server.start(crash_at=point)
    with contextlib.suppress(httpx.TransportError), server.client() as c:  # it may die before answering
        policy = {
            "target": "t",
            "schedule": EVERY_5_S,
            "selector": "backup=yes",
        }
        post(c, "/v1/backuppolicies", {"metadata": {"name": "nightly"}, "spec": policy})
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()

    def good() -> set[str]:
        return {b["metadata"]["name"] for b in policy_backups(server) if b["status"]["phase"] == "Succeeded"}

    before = good()
    seen: list[tuple[int, int]] = []  # (the policy's count, the Succeeded records read after it)

    def two_more(policy: dict[str, Any]) -> bool:
        done = good()
        seen.append((policy["status"]["succeeded"], len(done)))
        return len(done - before) >= 2

    server.wait_for("/v1/backuppolicies/nightly", two_more, timeout=90)
    # nothing is pruned (the incrementals keep their chain), so records only grow: a count above
    # the records read after it counted a backup that was not complete
    assert all(counted <= records for counted, records in seen), seen
    backups = policy_backups(server)
    with server.client() as c:  # a failed one is pruned once a good one follows: its event stays
        events = c.get("/v1/events", params={"kind": "VirtualMachineBackup", "limit": 1000}).json()["items"]
    assert not [e for e in events if e["reason"] == "Failed"], events
    for b in backups:
        status = b["status"]
        if status["phase"] == "Succeeded":  # counted good only when complete
            assert status["finished_at"] and status["processed_bytes"] == status["total_bytes"], status
    windows = [b["metadata"]["name"].removeprefix("a-") for b in backups]
    assert len(windows) == len(set(windows)), "one backup a window"
    server.wait_for("/v1/backuppolicies/nightly", lambda p: p["status"]["succeeded"] == len(good()))

    # no checkpoint left behind: once the windows stop and the last backup ended, the domain
    # holds the newest good backup's checkpoint (the next incremental's base) and no other
    with server.client() as c:
        assert c.delete("/v1/backuppolicies/nightly").status_code in (200, 204)
        uid = c.get("/v1/vms/a").json()["metadata"]["uid"]
    server.wait_for(
        "/v1/backups",
        lambda page: all(b["status"]["phase"] in ("Succeeded", "Failed") for b in page["items"]),
    )
    newest = max(
        (b for b in policy_backups(server) if b["status"]["phase"] == "Succeeded"),
        key=lambda b: b["status"]["finished_at"],
    )
    server.stop()
    sim = SimCloud(state_path=server.data_dir / "sim.db")
    try:
        found = asyncio.run(checkpoints(sim, domain_name(uid)))
    finally:
        sim.close()
    assert found == (newest["status"]["checkpoint"],)
