"""The CLI against a real `virtplane serve --demo` subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.crash.server import ServerProcess

MANIFEST = """\
apiVersion: virtplane.io/v1
kind: Volume
metadata:
  name: e2e-root
spec:
  pool: shared
  size_gib: 5
---
apiVersion: virtplane.io/v1
kind: VirtualMachine
metadata:
  name: e2e-vm
  labels:
    app: e2e
spec:
  run_policy: AlwaysOn
  cpu: 1
  memory_mib: 256
  disks:
    - volume: e2e-root
      boot_order: 1
"""


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtplane.cli.main", "--url", server.url, "--token", server.token, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_demo_apply_and_read_back(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", demo=True, boot_s=0.05)
    try:
        server.start()
        manifest = tmp_path / "vm.yaml"
        manifest.write_text(MANIFEST)
        applied = cli(server, "apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        assert "created" in applied.stdout
        deadline = time.monotonic() + 30
        vm: dict[str, object] = {}
        while time.monotonic() < deadline:
            got = cli(server, "get", "vm", "e2e-vm", "-o", "json")
            assert got.returncode == 0, got.stderr
            vm = json.loads(got.stdout)
            if vm["status"]["phase"] == "Running":  # type: ignore[index]
                break
            time.sleep(0.2)
        assert vm["metadata"]["labels"] == {"app": "e2e"}  # type: ignore[index]
        assert vm["status"]["phase"] == "Running", vm["status"]  # type: ignore[index]
        assert vm["status"]["host"] in ("host-1", "host-2", "host-3")  # type: ignore[index]
        again = cli(server, "apply", "-f", str(manifest))
        assert again.returncode == 0 and "unchanged" in again.stdout
        listed = json.loads(cli(server, "get", "vms", "-o", "json").stdout)
        names = {item["metadata"]["name"] for item in listed["items"]}
        assert {"web-1", "db-1", "e2e-vm"} <= names, "the demo VMs and ours"
    finally:
        server.stop()


def test_restart_keeps_data_and_token(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", demo=True, boot_s=0.05)
    try:
        server.start()
        token = server.token
        first = json.loads(cli(server, "get", "vms", "-o", "json").stdout)["items"]
        server.stop()
        server.start()
        assert server.token == token, "the admin token survives a restart"
        second = json.loads(cli(server, "get", "vms", "-o", "json").stdout)["items"]
        assert {v["metadata"]["uid"] for v in first} == {v["metadata"]["uid"] for v in second}, (
            "--demo adds nothing twice"
        )
    finally:
        server.stop()


def test_cli_reports_a_bad_manifest_without_a_traceback(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", demo=False)
    try:
        server.start()
        bad = tmp_path / "bad.yaml"
        bad.write_text("apiVersion: virtplane.io/v1\nkind: VirtualMachine\nmetadata: {name: Bad_Name}\n")
        result = cli(server, "apply", "-f", str(bad))
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        assert "DNS-1123" in result.stderr
    finally:
        server.stop()
