"""SIGKILL the server at each durable point of a restore from a backup (issue 36), restart it on
the same data, and see the restore complete with the VM in the power state it had before.

The points (``crashpoints.POINTS``): ``restore.entered-maintenance`` (the power state, the
hold and the stop recorded, nothing torn down), ``restore.disk-restored`` (a disk written back
from the backup, recorded on the operation), ``restore.overwritten`` (the VM overwritten from
what the backup captured), ``vm.domain-recreated`` (the domain defined again, the intent not
yet consumed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.crash.server import ServerProcess
from tests.crash.test_kill_restart import finished, operation, post, seed, settled, stays_stopped


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


def backed_up(server: ServerProcess, name: str) -> None:
    with server.client() as c:
        post(c, "/v1/backups", {"metadata": {"name": name}, "spec": {"vm": "a", "target": "t"}})
    done = server.wait_for(f"/v1/backups/{name}", lambda b: b["status"]["phase"] in ("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", done["status"]["message"]


@pytest.mark.parametrize(
    "point",
    ["restore.entered-maintenance", "restore.disk-restored", "restore.overwritten", "vm.domain-recreated"],
)
@pytest.mark.parametrize("before", ["Running", "Stopped"])
def test_a_backup_restore_killed_at_each_step_ends_in_the_power_state_before(
    server: ServerProcess, point: str, before: str
) -> None:
    server.start()
    seed(server)
    with server.client() as c:
        post(c, "/v1/backuptargets", {"metadata": {"name": "t"}, "spec": {"path": "/srv/backups", "capacity_gib": 10}})  # fmt: skip
    server.wait_for("/v1/vms/a", settled("Running"))
    backed_up(server, "b1")
    backed_up(server, "b2")  # an incremental: the restore reads the chain
    if before == "Stopped":
        operation(server, "stop-a", "a", "Stop")
        server.wait_for("/v1/operations/stop-a", finished)
        server.wait_for("/v1/vms/a", settled("Stopped"))
    server.stop()

    server.start(crash_at=point)
    # the crash point may fire before the response leaves: the operation was stored first
    with contextlib.suppress(httpx.TransportError):
        operation(server, "restore-a", "a", "Restore", restore={"backup": "b2", "mode": "Strict"})
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()
    op = server.wait_for("/v1/operations/restore-a", finished, timeout=30)
    assert op["status"]["phase"] == "Completed", op["status"]
    assert op["status"]["message"].startswith("VM restored from backup b2"), op["status"]
    assert op["status"]["progress"]["volume/a-root"] == "restored from backup b2"
    vm = server.wait_for("/v1/vms/a", settled(before), timeout=30)
    assert not any(c["type"] == "Maintenance" for c in vm["status"]["conditions"])
    if before == "Stopped":  # AOUSM: nothing but the recorded intent keeps it stopped
        stays_stopped(server, "a")
