"""SIGKILL the server at each durable point of a backup, restart it on the same data (the
simulator's state file keeps the hypervisor's job and checkpoints, as a real host outlives its
control plane), and see the backup end good: planned and not begun, or begun and followed by
the new process.

The crash points (``crashpoints.POINTS``): ``backup.planned`` (mode, checkpoint name and host
stored, the job not begun), ``backup.begun`` (the job runs on the host, recorded on the backup).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.crash.server import ServerProcess
from tests.crash.test_kill_restart import post


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


@pytest.mark.parametrize("point", ["backup.planned", "backup.begun"])
def test_a_backup_killed_at_its_durable_points_ends_good(server: ServerProcess, point: str) -> None:
    server.start()
    with server.client() as c:
        post(c, "/v1/hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        post(c, "/v1/storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 100}})  # fmt: skip
        post(c, "/v1/volumes", {"metadata": {"name": "a-root"}, "spec": {"pool": "shared", "size_gib": 1}})
        post(c, "/v1/vms", {"metadata": {"name": "a"}, "spec": {"disks": [{"volume": "a-root"}]}})
        post(c, "/v1/backuptargets", {"metadata": {"name": "t"}, "spec": {"path": "/srv/backups", "capacity_gib": 10}})  # fmt: skip
    server.wait_for("/v1/vms/a", lambda v: v["status"]["phase"] == "Running")
    server.stop()

    server.start(crash_at=point)
    # the plan follows at once: the answer may not leave
    with contextlib.suppress(httpx.TransportError), server.client() as c:
        post(c, "/v1/backups", {"metadata": {"name": "b1"}, "spec": {"vm": "a", "target": "t"}})
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()
    done = server.wait_for("/v1/backups/b1", lambda b: b["status"]["phase"] in ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]["message"]
    assert (done["status"]["mode"], done["status"]["total_bytes"]) == ("Full", 1024**3)
    with server.client() as c:  # and the next one builds on it
        post(c, "/v1/backups", {"metadata": {"name": "b2"}, "spec": {"vm": "a", "target": "t"}})
    after = server.wait_for("/v1/backups/b2", lambda b: b["status"]["phase"] in ("Succeeded", "Failed"))
    assert (after["status"]["phase"], after["status"]["base"]) == ("Succeeded", "b1"), after["status"]
