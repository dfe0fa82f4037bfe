"""SIGKILL of the control plane in the middle of a backup on the rig's real daemons (issue 36:
"SIGKILL the server mid-backup and the next backup is good").

A real `virtplane serve` subprocess (SQLite) manages the rig's two daemons; a running guest's
disk holds 512 MiB of a known pattern, and its full backup job is slowed (QEMU's job speed) to
run on the daemon past the kill and the restart. The server dies as soon as the backup says the hypervisor's job
began, and comes back on the same data directory. Then the first backup ends either Succeeded
with every byte of the disk in its file, or Failed with its file and its checkpoint gone;
no checkpoint is left on the domain that no good backup names; and the next backup Succeeds
(incremental on the first when the first was good).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess

from .conftest import Rig
from .test_migration_outlives_qemu import cleanup, console, ok, seed_fleet, wait

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

PATTERN, FILLED_FROM, FILLED_MIB = 0x5A, 1024**2, 512  # past the guest's DISK0/DISKTICK sectors
CHUNK_MIB = 256  # qemu-io takes at most 2 GiB a request
JOB_BYTES_S = 16 * 1024**2  # the job copies at most this: ~30 s for the filled range, past a restart


def over_the_filled_range(verb: str) -> list[str]:
    """qemu-io's -c arguments that ``verb`` (read/write) the pattern over the filled range."""
    return [
        arg
        for start in range(0, FILLED_MIB, CHUNK_MIB)
        for arg in ("-c", f"{verb} -P {PATTERN} {FILLED_FROM + start * 1024**2} {CHUNK_MIB}M")
    ]


ENDED = ("Succeeded", "Failed")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data")
    yield proc
    proc.stop()


def backup(c: httpx.Client, name: str) -> dict[str, Any]:
    result: dict[str, Any] = ok(c.get(f"/v1/backups/{name}"))
    return result


def ended(c: httpx.Client, name: str) -> dict[str, Any]:
    return wait(lambda: (b := backup(c, name))["status"]["phase"] in ENDED and b, f"backup {name} ended")  # type: ignore[no-any-return]


def checkpoints_on(rig: Rig, host: str, domain: str) -> set[str]:
    """The domain's checkpoints as its daemon lists them."""
    import libvirt

    conn = libvirt.open(rig.hosts[host].uri)
    try:
        return {c.getName() for c in conn.lookupByName(domain).listAllCheckpoints(0)}
    finally:
        conn.close()


def backup_job_running(rig: Rig, host: str, domain: str) -> bool:
    import libvirt

    conn = libvirt.open(rig.hosts[host].uri)
    try:
        stats = conn.lookupByName(domain).jobStats(0)
    finally:
        conn.close()
    return bool(stats.get("operation") == libvirt.VIR_DOMAIN_JOB_OPERATION_BACKUP)


def slow_down_backup_job(rig: Rig, host: str, domain: str) -> None:
    """Cap the speed of the domain's backup job in QEMU (libvirt has no knob for it)."""
    import json

    import libvirt
    import libvirt_qemu

    conn = libvirt.open(rig.hosts[host].uri)
    try:
        dom = conn.lookupByName(domain)
        jobs = json.loads(libvirt_qemu.qemuMonitorCommand(dom, '{"execute": "query-block-jobs"}', 0))
        backups = [j["device"] for j in jobs["return"] if j["type"] == "backup"]
        assert backups, f"no backup job on {domain}: {jobs}"
        for device in backups:
            speed = {"execute": "block-job-set-speed", "arguments": {"device": device, "speed": JOB_BYTES_S}}
            libvirt_qemu.qemuMonitorCommand(dom, json.dumps(speed), 0)
    finally:
        conn.close()


def holds_the_pattern(image: Path) -> bool:
    """Every byte of the filled range reads back as the pattern (through the backup's chain)."""
    out = subprocess.run(
        ["qemu-io", "-r", "-f", "qcow2", *over_the_filled_range("read"), str(image)],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode == 0 and "Pattern verification failed" not in out.stdout + out.stderr


def test_sigkill_mid_backup_the_first_ends_good_or_cleaned_and_the_next_is_good(
    rig: Rig, server: ServerProcess
) -> None:
    unique = uuid.uuid4().hex[:8]
    # its own target name and directory: the daemons keep a pool per target (backups-NAME) for
    # the whole slow session, and refuse two pools on one path
    target_name, target_dir = f"kill-{unique}", Path(rig.shared_pool.path) / f"kill-backups-{unique}"
    domain = volume_file = ""
    server.start()
    try:
        with server.client() as c:
            seed_fleet(c, rig)
            ok(c.post("/v1/volumes", json={"metadata": {"name": "bk-root"}, "spec": {"pool": "shared", "size_gib": 1}}))  # fmt: skip
            wait(lambda: ok(c.get("/v1/volumes/bk-root"))["status"]["phase"] == "Ready", "volume ready")
            volume_file = ok(c.get("/v1/volumes/bk-root"))["status"]["file"]
            subprocess.run(
                [
                    "qemu-io",
                    "-f",
                    "qcow2",
                    *over_the_filled_range("write"),
                    str(Path(rig.shared_pool.path) / volume_file),
                ],
                check=True,
                capture_output=True,
            )  # no VM uses the volume yet
            ok(c.post("/v1/vms", json={"metadata": {"name": "bk"}, "spec": {
                "run_policy": "AlwaysOn", "cpu": 1, "memory_mib": 256, "termination_grace_period_s": 20,
                "disks": [{"volume": "bk-root", "boot_order": 1}],
                "boot": {"kernel": "guest-kernel", "initrd": "guest-initrd", "cmdline": "console=ttyS0 panic=-1 quiet"},
            }}))  # fmt: skip
            running = wait(lambda: (v := ok(c.get("/v1/vms/bk")))["status"]["phase"] == "Running" and v, "VM running")  # fmt: skip
            uid, host = running["metadata"]["uid"], running["status"]["host"]
            domain = f"virtplane-{uid}"
            wait(lambda: "TICK 1" in console(server.data_dir, uid), "guest up")
            ok(c.post("/v1/backuptargets", json={"metadata": {"name": target_name}, "spec": {"path": str(target_dir), "capacity_gib": 20}}))  # fmt: skip
            ok(c.post("/v1/backups", json={"metadata": {"name": "b1"}, "spec": {"vm": "bk", "target": target_name}}))  # fmt: skip
            begun = wait(lambda: (b := backup(c, "b1"))["status"]["begun"] and b, "the backup's job begun")
        slow_down_backup_job(rig, host, domain)
        server.kill()
        assert begun["status"]["phase"] == "Running", "killed before the server could count it"
        assert backup_job_running(rig, host, domain), "the job goes on without the server"

        server.start()
        with server.client() as c:
            first = ended(c, "b1")["status"]
            # the daemon may still write the file of a backup counted good: it would be incomplete
            assert not backup_job_running(rig, host, domain), f"counted {first['phase']} while its job runs"
            good = {first["checkpoint"]} if first["phase"] == "Succeeded" else set()
            files = [target_dir / d["backup_volume"] for d in first["disks"]]
            assert files and first["checkpoint"]
            if first["phase"] == "Succeeded":
                assert first["mode"] == "Full" and first["processed_bytes"] == first["total_bytes"] > 0
                assert all(holds_the_pattern(f) for f in files), "counted good while incomplete"
            else:  # its clean-up follows the failure: file and checkpoint gone
                wait(lambda: not backup(c, "b1")["status"]["cleanup_pending"], "b1 cleaned up")
                assert not any(f.exists() for f in files), first
            assert checkpoints_on(rig, host, domain) <= good, "a checkpoint no good backup knows"

            ok(c.post("/v1/backups", json={"metadata": {"name": "b2"}, "spec": {"vm": "bk", "target": target_name}}))  # fmt: skip
            second = ended(c, "b2")["status"]
            assert second["phase"] == "Succeeded", second["message"]
            if first["phase"] == "Succeeded":
                assert (second["mode"], second["base"]) == ("Incremental", "b1"), second
            else:
                assert second["mode"] == "Full", second
            assert holds_the_pattern(target_dir / second["disks"][0]["backup_volume"])
            assert checkpoints_on(rig, host, domain) == {second["checkpoint"]}
    finally:
        server.kill()
        if domain:
            cleanup(rig, domain, volume_file)
