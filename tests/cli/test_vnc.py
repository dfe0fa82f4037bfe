"""``virtplane vnc`` as a process against the live server (simulated hosts): a viewer on the
local port it prints gets the VM's RFB through the server's WebSocket, and its refusals are
said before any port opens."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import LiveServer, seed_console_world, wait_json
from tests.rfb import Rfb, full_screen
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.main import app
from virtplane.drivers.sim._display import screen_rgb

CLI = str(Path(sys.executable).parent / "virtplane")


@pytest.fixture
def world(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client("admin") as admin:
        seed_console_world(admin)
        yield admin


def test_a_native_viewer_on_the_printed_port_sees_the_screen(
    live_server: LiveServer, world: httpx.Client
) -> None:
    env = {**os.environ, "VIRTPLANE_URL": live_server.url, "VIRTPLANE_TOKEN": live_server.tokens["operator"]}
    cli = subprocess.Popen(
        [CLI, "vnc", "web-1", "--once"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        assert cli.stdout is not None
        line = cli.stdout.readline()  # printed once the port listens
        found = re.fullmatch(r"VNC of VM web-1 on 127\.0\.0\.1:(\d+)\n", line)
        assert found, line
        with socket.create_connection(("127.0.0.1", int(found[1]))) as viewer:
            screen = full_screen(Rfb.over_socket(viewer))
        assert screen.name == "virtplane simulated guest web-1"
        assert screen.rgb == screen_rgb("web-1")
        assert cli.wait(timeout=30) == 0, cli.stderr.read() if cli.stderr else ""  # --once: the viewer left
    finally:
        cli.kill()
    audit = wait_json(
        world, "/v1/audit?name=web-1", lambda body: any(r["verb"] == "vnc-close" for r in body["items"])
    )
    assert [r["token"] for r in audit["items"] if r["verb"] == "vnc-open"] == ["test-operator"]


@pytest.mark.parametrize(
    ("vm", "role", "error", "code"),
    [
        (
            "web-1",
            "viewer",
            "Error (Forbidden): test-viewer has role viewer; this needs operator",
            ExitCode.DENIED,
        ),
        ("nobody", "operator", "Error (NotFound): VirtualMachine nobody does not exist", ExitCode.NOT_FOUND),
        ("off-1", "operator", "Error (NotRunning): VM off-1 is Stopped", ExitCode.FAILED),
    ],
)
def test_refusals_are_said_before_a_port_opens(
    live_server: LiveServer, world: httpx.Client, vm: str, role: str, error: str, code: ExitCode
) -> None:
    result = CliRunner().invoke(
        app, ["--url", live_server.url, "--token", live_server.tokens[role], "vnc", vm]
    )
    assert result.exit_code == code
    assert error in " ".join(result.output.split())
    assert "127.0.0.1" not in result.output
