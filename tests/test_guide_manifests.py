"""The operator guide's manifests (one of each main kind) apply as written to ``serve --demo``,
and the VM among them runs: the guide shows what the server takes, not what it once took."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from tests.conftest import eventually_sync
from tests.crash.server import ServerProcess
from tests.test_readme import blocks

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "operator-guide.md"
MAIN_KINDS = {"Host", "StoragePool", "Image", "Network", "Volume", "VirtualMachine"}


def test_the_guide_has_a_manifest_of_each_main_kind_and_each_applies(tmp_path: Path) -> None:
    manifests = [text for text in blocks(GUIDE.read_text(), "yaml") if "apiVersion:" in text]
    kinds = [doc["kind"] for text in manifests for doc in yaml.safe_load_all(text)]
    assert set(kinds) >= MAIN_KINDS, f"missing from the guide: {MAIN_KINDS - set(kinds)}"
    server = ServerProcess(tmp_path / "data", demo=True)
    server.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTPLANE_")}
        env.update(VIRTPLANE_URL=server.url, VIRTPLANE_TOKEN=server.token)
        for number, text in enumerate(manifests):
            path = tmp_path / f"manifest-{number}.yaml"
            path.write_text(text)
            done = subprocess.run(
                [sys.executable, "-m", "virtplane.cli.main", "apply", "-f", str(path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{text}\n{done.stdout}\n{done.stderr}"
            assert "created" in done.stdout, done.stdout
        vms = [
            doc["metadata"]["name"]
            for t in manifests
            for doc in yaml.safe_load_all(t)
            if doc["kind"] == "VirtualMachine"
        ]
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.token}"}) as client:

            def running() -> bool:
                return all(client.get(f"/v1/vms/{vm}").json()["status"]["phase"] == "Running" for vm in vms)

            eventually_sync(running, timeout=60)
    finally:
        server.stop()
