"""``virtplane console`` as a process against the live server (simulated hosts): through pipes
(line by line), through a pseudo-terminal (raw, Ctrl-] detaches, the terminal restored), and
its errors. Output is read until what the test waits for has arrived, never for a fixed time."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import LiveServer, seed_console_world
from virtplane.cli.console import console_url
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.main import app

CLI = str(Path(sys.executable).parent / "virtplane")
PROMPT = b"root@web-1:~# "


@pytest.fixture
def world(live_server: LiveServer) -> Iterator[httpx.Client]:
    with live_server.client("admin") as admin:
        seed_console_world(admin)
        yield admin


def env(server: LiveServer, role: str = "operator") -> dict[str, str]:
    return {**os.environ, "VIRTPLANE_URL": server.url, "VIRTPLANE_TOKEN": server.tokens[role]}


def read_until(fd: int, text: bytes, timeout: float = 15.0) -> bytes:
    """Bytes from ``fd`` until ``text`` came (the deadline only bounds a hang)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} never came; got {seen!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            assert chunk, f"the output ended before {text!r}; got {seen!r}"
            seen += chunk
    return seen


def test_line_by_line_through_pipes_then_ctrl_bracket_detaches(
    live_server: LiveServer, world: httpx.Client
) -> None:
    cli = subprocess.Popen(
        [CLI, "console", "web-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env(live_server)
    )
    assert cli.stdin is not None and cli.stdout is not None
    try:
        read_until(cli.stdout.fileno(), PROMPT)
        cli.stdin.write(b"hostname\n")
        cli.stdin.flush()
        assert b"hostname\r\nweb-1\r\n" in read_until(cli.stdout.fileno(), b"web-1\r\n")
        cli.stdin.write(b"\x1d\n")
        cli.stdin.flush()
        assert cli.wait(15) == 0
    finally:
        cli.kill()


def test_at_the_end_of_the_input_the_last_answer_is_printed(
    live_server: LiveServer, world: httpx.Client
) -> None:
    done = subprocess.run(
        [CLI, "console", "web-1", "--linger", "2"],
        input=b"uname -a\n",
        capture_output=True,
        env=env(live_server),
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert b"Linux web-1 " in done.stdout


def test_a_terminal_goes_raw_ctrl_bracket_detaches_and_the_terminal_comes_back(
    live_server: LiveServer, world: httpx.Client
) -> None:
    controller, terminal = pty.openpty()
    before = termios.tcgetattr(terminal)
    cli = subprocess.Popen(
        [CLI, "console", "web-1"], stdin=terminal, stdout=terminal, stderr=terminal, env=env(live_server)
    )
    try:
        assert b"Ctrl-] detaches" in read_until(controller, PROMPT)
        os.write(controller, b"hostname\r")  # Enter in a raw terminal is a carriage return
        read_until(controller, b"hostname\r\nweb-1\r\n")
        os.write(controller, b"\x1d")
        assert b"Detached" in read_until(controller, b"Detached from the console of VM web-1.")
        assert cli.wait(15) == 0
        assert termios.tcgetattr(terminal) == before, "the terminal's settings are restored"
    finally:
        cli.kill()
        os.close(controller)
        os.close(terminal)


def test_the_session_ends_with_the_reason_when_the_vm_stops(
    live_server: LiveServer, world: httpx.Client
) -> None:
    cli = subprocess.Popen(
        [CLI, "console", "web-1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(live_server),
    )
    assert cli.stdout is not None and cli.stderr is not None
    try:
        read_until(cli.stdout.fileno(), PROMPT)
        assert world.patch("/v1/vms/web-1", json={"spec": {"run_policy": "AlwaysOff"}}).status_code == 200
        assert cli.wait(30) == 1
        assert "Console closed: VM web-1 stopped" in cli.stderr.read().decode()
    finally:
        cli.kill()


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
def test_refusals_are_clear_errors(
    live_server: LiveServer, world: httpx.Client, vm: str, role: str, error: str, code: ExitCode
) -> None:
    result = CliRunner().invoke(
        app, ["--url", live_server.url, "--token", live_server.tokens[role], "console", vm], input=""
    )
    assert result.exit_code == code
    assert error in " ".join(result.output.split())


def test_no_server_is_server_unreachable() -> None:
    result = CliRunner().invoke(app, ["--url", "http://127.0.0.1:9", "--token", "x", "console", "web-1"])
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "Error (ServerUnreachable)" in result.output


def test_the_websocket_url_follows_the_server_url() -> None:
    assert console_url("http://h:8470/", "web 1") == "ws://h:8470/v1/vms/web%201/console"
    assert console_url("https://h", "a/b") == "wss://h/v1/vms/a%2Fb/console"
