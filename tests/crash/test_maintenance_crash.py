"""SIGKILL the server at each durable point of a host maintenance, restart it on the same data,
and see the maintenance end as it would have: the shared-storage VM migrated, the local-storage
VM stopped (strategy Stop) and, once the maintenance is cancelled, started again where it was.

The crash points (``crashpoints.POINTS``): ``maintenance.planned`` (the plan and the host's
AskMaintenance stored, nothing moved), ``maintenance.vm-held`` (the local VM's power intent and
hold stored, the VM not stopped yet), ``maintenance.cancelling`` (the cancel under way, nothing
released, the host not moved back yet).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess, intents_left
from tests.crash.test_kill_restart import post


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


def _two_hosts_and_two_vms(server: ServerProcess) -> None:
    """VM ``moving`` on a shared pool, VM ``staying`` on h1's local pool, both running on h1
    (the only host then); then h2 joins."""
    with server.client() as c:
        post(c, "/v1/hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        post(c, "/v1/storagepools", {"metadata": {"name": "h1-local"}, "spec": {"kind": "local", "host": "h1", "driver_pool": "local", "capacity_gib": 10}})  # fmt: skip
        post(c, "/v1/storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 100}})  # fmt: skip
        for vm, pool in (("staying", "h1-local"), ("moving", "shared")):
            post(
                c, "/v1/volumes", {"metadata": {"name": f"{vm}-root"}, "spec": {"pool": pool, "size_gib": 1}}
            )
            post(c, "/v1/vms", {"metadata": {"name": vm}, "spec": {"disks": [{"volume": f"{vm}-root"}], "termination_grace_period_s": 1}})  # fmt: skip
    for vm in ("staying", "moving"):
        server.wait_for(f"/v1/vms/{vm}", _running_on("h1"))
    with server.client() as c:
        post(c, "/v1/hosts", {"metadata": {"name": "h2"}, "spec": {"uri": "sim://h2"}})
    server.wait_for("/v1/hosts/h2", lambda h: h["status"]["connection"] == "Up")


def _host(state: str) -> Any:
    return lambda h: h["status"]["resource_state"] == state


def _running_on(host: str) -> Any:
    return lambda v: v["status"]["phase"] == "Running" and v["status"]["host"] == host and not intents_left(v)


def _maintenance(server: ServerProcess) -> None:
    with server.client() as c:
        post(c, "/v1/hosts/h1/maintenance", {"strategy": "Stop"})


def _cancel(server: ServerProcess) -> None:
    with server.client() as c:
        response = c.delete("/v1/hosts/h1/maintenance")
        assert response.status_code in (200, 202), response.text


def _drained(server: ServerProcess) -> None:
    server.wait_for("/v1/hosts/h1", _host("Maintenance"), timeout=60)
    server.wait_for("/v1/vms/moving", _running_on("h2"))
    staying = server.wait_for("/v1/vms/staying", lambda v: v["status"]["phase"] == "Stopped")
    assert staying["metadata"]["annotations"].get("virtplane.io/held-by") == "maintenance/h1"


def _back(server: ServerProcess) -> None:
    server.wait_for("/v1/hosts/h1", _host("Enabled"), timeout=60)
    server.wait_for("/v1/vms/staying", _running_on("h1"), timeout=60)
    server.wait_for("/v1/vms/moving", _running_on("h2"))


@pytest.mark.parametrize("point", ["maintenance.planned", "maintenance.vm-held"])
def test_a_drain_killed_at_its_durable_points_ends_and_its_cancel_starts_the_stopped_vm(
    server: ServerProcess, point: str
) -> None:
    server.start()
    _two_hosts_and_two_vms(server)
    server.stop()

    server.start(crash_at=point)
    with contextlib.suppress(httpx.TransportError):  # the plan is written at once: the answer may not leave
        _maintenance(server)
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()
    _drained(server)
    _cancel(server)
    _back(server)


def test_a_cancel_killed_before_it_moved_anything_still_brings_the_host_and_its_vm_back(
    server: ServerProcess,
) -> None:
    server.start()
    _two_hosts_and_two_vms(server)
    _maintenance(server)
    _drained(server)
    server.stop()

    server.start(crash_at="maintenance.cancelling")
    with contextlib.suppress(httpx.TransportError):
        _cancel(server)
    assert server.wait_killed() == -9, "the server died at the crash point"

    server.start()
    _back(server)
