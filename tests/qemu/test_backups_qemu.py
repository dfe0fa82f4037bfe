"""Backups through the API on the rig's two libvirt daemons (issue 36): a running guest's full
backup with its filesystems frozen by its agent, an incremental one that writes only what the
guest wrote since and holds its newer DISKTICK read through its base, a live migration after
which the next backup is still incremental (its checkpoint redefined on the new host; the
bitmap travelled in the shared file) and says so, and a deletion that removes the backup's file.

The guest writes ``DISKTICK n`` into sector 1 of its disk every tick (``tick_in`` reads it
from a backup chain's newest file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from virtplane.domain.resources import OperationType, RunPolicy, VMPhase

from .conftest import console_shows, eventually
from .plane import QemuPlane
from .test_backup_driver_qemu import tick_in, ticks

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def backed_up(api: httpx.AsyncClient, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "kind": "VirtualMachineBackup",
        "metadata": {"name": name},
        "spec": {"vm": "g", "target": "t", **spec},
    }
    created = await api.post("/v1/backups", json=body)
    assert created.status_code == 201, created.text

    async def probe() -> dict[str, Any]:
        found: dict[str, Any] = (await api.get(f"/v1/backups/{name}")).json()
        return found

    done = await eventually(probe, lambda b: b["status"]["phase"] in ("Succeeded", "Failed"), 120.0)
    assert done["status"]["phase"] == "Succeeded", done["status"]["message"]
    return done


async def test_full_incremental_and_incremental_again_after_a_migration(
    qplane: QemuPlane, tmp_path: Path
) -> None:
    rig = qplane.rig
    await qplane.add_host("a")
    await qplane.add_host("b")
    await qplane.add_volume("g-root")
    qplane.add_vm("g", RunPolicy.ALWAYS_ON, "g-root")
    await qplane.wait_settled("g", VMPhase.RUNNING)
    await console_shows(rig, qplane.domain("g"), "TICK 2")
    directory = rig.base / "shared" / "backups"
    async with qplane.api() as api:
        target = {
            "kind": "BackupTarget",
            "metadata": {"name": "t"},
            "spec": {"path": str(directory), "capacity_gib": 20},
        }
        assert (await api.post("/v1/backuptargets", json=target)).status_code == 201

        full = await backed_up(api, "b1")
        assert full["status"]["mode"] == "Full" and full["status"]["consistency"] == "FilesystemFrozen"
        first = tick_in(directory / full["status"]["disks"][0]["backup_volume"], tmp_path)

        await console_shows(rig, qplane.domain("g"), "TICK ", count=ticks(rig, qplane.domain("g")) + 2)
        incremental = await backed_up(api, "b2")
        assert (incremental["status"]["mode"], incremental["status"]["base"]) == ("Incremental", "b1")
        assert 0 < incremental["status"]["total_bytes"] <= 1024**2 < full["status"]["total_bytes"]
        newest = directory / incremental["status"]["disks"][0]["backup_volume"]
        assert tick_in(newest, tmp_path) > first

        await qplane.operate("g", OperationType.MIGRATE)
        host = qplane.vm("g").status.host
        # the guest writes on the new host before the next backup: else it may have nothing to copy
        # (a full run met 0 bytes: the migration was over before the guest's next tick)
        await console_shows(rig, qplane.domain("g"), "TICK ", count=ticks(rig, qplane.domain("g")) + 2)
        after = await backed_up(api, "b3")  # the bitmap travelled in the shared file: incremental
        assert (after["status"]["mode"], after["status"]["base"]) == ("Incremental", "b2"), after["status"]
        assert after["status"]["mode_reason"] == (
            f"incremental on b2 (its checkpoint {incremental['status']['checkpoint']} redefined on host "
            f"{host} after the VM moved)"
        )
        assert 0 < after["status"]["total_bytes"] <= 1024**2
        newest = directory / after["status"]["disks"][0]["backup_volume"]
        assert tick_in(newest, tmp_path) > tick_in(
            directory / incremental["status"]["disks"][0]["backup_volume"], tmp_path
        )

        refused = await api.delete("/v1/backups/b1")
        assert (refused.status_code, refused.json()["reason"]) == (409, "BackupInUse")
        gone = directory / after["status"]["disks"][0]["backup_volume"]
        assert gone.exists()
        assert (await api.delete("/v1/backups/b3")).status_code in (200, 202)

        async def deleted() -> int:
            return (await api.get("/v1/backups/b3")).status_code

        await eventually(deleted, lambda status: status == 404, 60.0)
        assert not gone.exists()
