"""One set of controllers per data directory: a second server is refused while the first works.

A drain and a loop of live migrations run on a real `virtplane serve`; meanwhile a
second server is started on the same directory again and again. Each must exit at
once, naming the first one's pid, having started nothing: no migration fails, no VM
boots twice, and the simulated hypervisors' own state file never shows a domain live
on two hosts (read from the file, not through the API).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess, free_port

VMS = ("m1", "m2", "m3")
HOSTS = ("h1", "h2", "h3")
LIVE_STATES = ("starting", "running", "paused", "shutting-down", "migrating", "incoming")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", boot_s=0.0, shutdown_s=0.0)
    proc.start()
    yield proc
    proc.stop()


def ok(response: httpx.Response) -> Any:
    assert response.status_code in (200, 201), response.text
    return response.json()


def seed(c: httpx.Client) -> None:
    for host in HOSTS:
        ok(c.post("/v1/hosts", json={"metadata": {"name": host}, "spec": {"uri": f"sim://{host}"}}))
    for vm in VMS:
        ok(
            c.post(
                "/v1/vms",
                json={"metadata": {"name": vm}, "spec": {"run_policy": "AlwaysOn", "memory_mib": 1024}},
            )
        )
    # slow enough that each migration is in flight while second servers come and go
    ok(c.patch("/v1/settings/migration.bandwidth_mib_s", json={"spec": {"value": "2048"}}))


class DoubleRunWatch:
    """Reads the simulator's state file over and over; records any domain live on two hosts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.samples = 0
        self.doubles: list[tuple[str, list[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DoubleRunWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        marks = ",".join("?" * len(LIVE_STATES))
        while not self._stop.is_set():
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
            try:
                rows = db.execute(
                    f"SELECT name, group_concat(host) FROM domains WHERE state IN ({marks}) "
                    "GROUP BY name HAVING count(*) > 1",
                    LIVE_STATES,
                ).fetchall()
            finally:
                db.close()
            self.samples += 1
            self.doubles.extend((name, hosts.split(",")) for name, hosts in rows)


def second_server(data_dir: Path, port: int | None = None) -> subprocess.CompletedProcess[str]:
    """Start another `virtplane serve`; it must exit by itself (killed after 90 s if it runs on:
    on a loaded 2-core machine its imports alone took over 30 s)."""
    args = [sys.executable, "-m", "virtplane.cli.main", "serve", "--data-dir", str(data_dir),
            "--port", str(port or free_port()), "--sim-boot-seconds", "0"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the second server kept running:\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def migrate_all(c: httpx.Client, round_: int) -> list[str]:
    names = []
    for vm in VMS:
        name = f"{vm}-mig-{round_}"
        ok(c.post("/v1/operations", json={"metadata": {"name": name}, "spec": {"vm": vm, "type": "Migrate"}}))
        names.append(name)
    return names


def test_a_second_server_on_the_same_directory_is_refused_and_starts_nothing(server: ServerProcess) -> None:
    assert server.proc is not None
    pid = server.proc.pid
    with server.client() as c:
        seed(c)
        for vm in VMS:
            server.wait_for(f"/v1/vms/{vm}", lambda v: v["status"]["phase"] == "Running")
        operations: list[str] = []
        refusals = 0
        with DoubleRunWatch(server.data_dir / "sim.db") as watch:
            for round_ in range(4):
                operations += migrate_all(c, round_)
                second = second_server(server.data_dir)
                assert second.returncode != 0, second.stdout + second.stderr
                assert f"another virtplane (pid {pid}) is serving" in second.stderr, second.stderr
                refusals += 1
                for name in operations[-len(VMS) :]:
                    server.wait_for(f"/v1/operations/{name}", lambda o: o["status"]["phase"] != "InProgress"
                                    and o["status"]["phase"] != "Pending", timeout=60)  # fmt: skip
            drained = next(v["status"]["host"] for v in (ok(c.get(f"/v1/vms/{vm}")) for vm in VMS))
            ok(c.post(f"/v1/hosts/{drained}/maintenance", json={"strategy": "Migration"}))
            for _ in range(2):
                assert second_server(server.data_dir).returncode != 0
                refusals += 1
            server.wait_for(
                f"/v1/hosts/{drained}/maintenance", lambda m: m["host_state"] == "Maintenance", timeout=60
            )
        phases = {name: ok(c.get(f"/v1/operations/{name}"))["status"] for name in operations}
        events = ok(c.get("/v1/events", params={"limit": 1000}))["items"]
    failed = {name: s["message"] for name, s in phases.items() if s["phase"] != "Completed"}
    assert not failed, failed
    assert not [e for e in events if e["reason"] == "MigrationFailed"]
    starts = [e for e in events if e["reason"] == "Started" and e["kind"] == "VirtualMachine"]
    assert sorted(e["name"] for e in starts) == sorted(VMS), "each VM booted once, at creation"
    assert refusals == 6
    assert watch.samples > 10 and not watch.doubles, watch.doubles


def test_a_server_whose_port_is_taken_starts_nothing(server: ServerProcess, tmp_path: Path) -> None:
    """The port is bound before the store is opened: a failed bind leaves an empty directory."""
    other = tmp_path / "other"
    refused = second_server(other, port=server.port)
    assert refused.returncode != 0
    assert f"cannot listen on 127.0.0.1:{server.port}" in refused.stderr, refused.stderr
    assert sorted(p.name for p in other.iterdir()) == ["virtplane.lock"], "no store, token or sim state"
