"""Back up a running ``virtplane serve --demo`` with the CLI, lose its machine, restore the
backup with the CLI into a fresh data directory beside the same simulated hosts, and serve
again: the VM migrated since the backup is found where it runs, and runs there only.

Real processes throughout (the server, ``virtplane backup``, ``virtplane store-restore``);
the hosts' state file is read directly, as the hypervisors' own record.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.crash.server import ServerProcess
from virtplane.store.backup import sqlite_backup

FAST_LINK = ["--sim-link-mib-s", "100000"]


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "virtplane.cli.main",
        "--url",
        server.url,
        "--token",
        server.token,
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _until(client: httpx.Client, path: str, accept: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(path).json()
        if accept(body):
            return body
        assert time.monotonic() < deadline, f"{path}: {body}"
        time.sleep(0.1)


def _live_on(sim_db: Path, domain: str) -> list[str]:
    """The hosts whose state file has ``domain`` live (the simulator writes a commit per change)."""
    with contextlib.closing(sqlite3.connect(f"file:{sim_db}?mode=ro", uri=True)) as hosts:
        rows = hosts.execute("SELECT host FROM domains WHERE name = ? AND live IS NOT NULL", (domain,))
        return sorted(row[0] for row in rows)


def test_backup_then_restore_on_a_fresh_machine_over_the_same_hosts(tmp_path: Path) -> None:
    old = ServerProcess(tmp_path / "old", demo=True, extra_args=FAST_LINK)
    old.start()
    try:
        with httpx.Client(
            base_url=old.url, headers={"Authorization": f"Bearer {old.token}"}, timeout=10
        ) as api:
            app = _until(api, "/v1/vms/app-1", lambda vm: vm["status"]["phase"] == "Running")
            backed_up = _cli(old, "backup", "-o", str(tmp_path / "yesterday.db"))
            assert backed_up.returncode == 0, backed_up.stdout + backed_up.stderr
            then = app["status"]["host"]
            target = next(h for h in ("host-2", "host-3", "host-1") if h != then)
            moved = _cli(old, "vm", "migrate", "app-1", "--to", target, "--wait", "--timeout", "60")
            assert moved.returncode == 0, moved.stdout + moved.stderr
        old.kill()  # the control plane's machine is gone; the hosts are not
    finally:
        old.stop()

    new = ServerProcess(tmp_path / "new", extra_args=FAST_LINK)
    new.data_dir.mkdir()
    sqlite_backup(old.data_dir / "sim.db", new.data_dir / "sim.db")  # the same hypervisors
    domain = f"virtplane-{app['metadata']['uid']}"
    assert _live_on(new.data_dir / "sim.db", domain) == [target]
    restore = [sys.executable, "-m", "virtplane.cli.main", "store-restore", str(tmp_path / "yesterday.db")]
    restored = subprocess.run(
        [*restore, "--data-dir", str(new.data_dir)], capture_output=True, text=True, timeout=60, check=False
    )
    assert restored.returncode == 0, restored.stdout + restored.stderr
    new.start()
    try:
        with httpx.Client(
            base_url=new.url, headers={"Authorization": f"Bearer {new.token}"}, timeout=10
        ) as api:
            _until(
                api,
                "/v1/vms/app-1",
                lambda vm: (vm["status"]["host"], vm["status"]["phase"]) == (target, "Running"),
            )
            reasons = [
                e["reason"]
                for e in api.get("/v1/events", params={"kind": "vms", "name": "app-1"}).json()["items"]
            ]
            assert "FoundOnOtherHost" in reasons
            for vm in api.get("/v1/vms").json()["items"]:  # every demo VM settles
                _until(
                    api,
                    f"/v1/vms/{vm['metadata']['name']}",
                    lambda v: v["status"]["phase"] in ("Running", "Stopped"),
                )
        assert _live_on(new.data_dir / "sim.db", domain) == [target]
    finally:
        new.stop()
