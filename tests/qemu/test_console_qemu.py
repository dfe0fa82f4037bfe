"""Issue 14's console on real libvirt + QEMU: ``virtplane console`` (a process driven through a
pseudo-terminal) reaches a running guest's serial console through the API, which opens it
over libvirt's console stream on the guest's host, shows the guest's prompt, and runs a
command in it; a second session is refused while the first holds the console. The dashboard's
console (xterm.js in headless Chromium) does the same.

The guest is the rig's busybox kernel and initrd started with ``rdinit=/bin/busybox -- sh``:
its PID 1 is a shell on the serial console, so what is typed runs. The server runs in the
test's event loop (uvicorn, lifespan off: the plane is started here), so the API and the
drivers share one loop, as in ``virtplane serve``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.web.browser import checked_page, chromium, sign_in
from virtplane.domain.resources import Boot, Metadata, RunPolicy, VirtualMachine, VirtualMachineSpec, VMPhase

from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

CLI = str(Path(sys.executable).parent / "virtplane")
SHELL_BOOT = "console=ttyS0 panic=-1 quiet rdinit=/bin/busybox -- sh"
ANSWER_MS = 5000  # how long a line typed into a ready shell may take to be answered, under TCG


async def read_until(fd: int, text: bytes, seen: bytes = b"", limit_s: float = LIMIT_S) -> bytes:
    """Bytes from ``fd`` (a pty) until ``text`` came; the limit guards a hang only."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while text not in seen:
        if loop.time() >= deadline:
            raise TimeoutError(f"{text!r} never came; got {seen[-2000:]!r}")
        if select.select([fd], [], [], 0)[0]:
            seen += os.read(fd, 4096)
        else:
            await asyncio.sleep(0.05)
    return seen


async def shell_takes_whole_lines(fd: int, seen: bytes) -> bytes:
    """``the_shell_takes_whole_lines`` (below) through the CLI's terminal ``fd``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIMIT_S
    for attempt in itertools.count():
        os.write(fd, f"echo ready-$((100+{attempt}))\r".encode())
        try:
            return await read_until(fd, f"\nready-{100 + attempt}".encode(), seen, ANSWER_MS / 1000)
        except TimeoutError:
            assert loop.time() < deadline, f"the shell never ran a whole line: {seen[-2000:]!r}"
    raise AssertionError("unreachable")


async def running_shell_guest(qplane: QemuPlane, name: str) -> None:
    """A guest on host a whose serial console is a shell (PID 1), once it runs."""
    await qplane.add_host("a")
    qplane.store.create(
        VirtualMachine(
            metadata=Metadata(name=name),
            spec=VirtualMachineSpec(
                run_policy=RunPolicy.ALWAYS_ON,
                cpu=1,
                memory_mib=192,
                boot=Boot(kernel="guest-kernel", initrd="guest-initrd", cmdline=SHELL_BOOT),
            ),
        )
    )
    await qplane.wait_settled(name, VMPhase.RUNNING)


async def test_the_cli_runs_a_command_on_a_guests_serial_console(qplane: QemuPlane, server: str) -> None:
    await running_shell_guest(qplane, "shell-1")
    token = qplane.store.create_token("console-operator", "operator")
    controller, terminal = pty.openpty()
    cli = subprocess.Popen(
        [CLI, "console", "shell-1"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "VIRTPLANE_URL": server, "VIRTPLANE_TOKEN": token},
    )
    try:
        seen = await read_until(controller, b"Ctrl-] detaches")
        seen = await shell_takes_whole_lines(controller, seen)
        os.write(controller, b"echo VP-$((6*7)) $(busybox uname -s)\r")
        seen = await read_until(controller, b"VP-42 Linux", seen)

        url = server.replace("http://", "ws://") + "/v1/vms/shell-1/console"
        with pytest.raises(InvalidStatus) as refused:
            await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
        assert refused.value.response.status_code == 409
        assert json.loads(refused.value.response.body or b"{}")["reason"] == "ConsoleBusy"

        os.write(controller, b"\x1d")
        await read_until(controller, b"Detached from the console of VM shell-1.", seen)
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, cli.wait, 30) == 0
    finally:
        cli.kill()
        os.close(controller)
        os.close(terminal)
    # detached: the console is free again, and the guest still runs its shell
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send(b"echo again-$((1+1))\r")
        output = b""
        while b"again-2" not in output:
            message = await asyncio.wait_for(ws.recv(), LIMIT_S)
            output += message if isinstance(message, bytes) else message.encode()
    reasons = [reason for reason, _ in qplane.events("shell-1")]
    assert reasons.count("ConsoleAttached") == 2


@pytest.mark.browser
async def test_the_dashboards_console_runs_a_command_on_a_guests_serial_console(
    qplane: QemuPlane, server: str
) -> None:
    await running_shell_guest(qplane, "shell-2")
    token = qplane.store.create_token("web-operator", "operator")
    # Playwright's sync API runs its own loop: in a thread, while this loop serves the API
    await asyncio.to_thread(type_in_the_dashboards_console, server, token, "shell-2")
    reasons = [reason for reason, _ in qplane.events("shell-2")]
    assert reasons.count("ConsoleAttached") == 1


def the_shell_takes_whole_lines(page: Any, rows: Any) -> None:
    """Type a line until the guest's shell runs it whole. Keys that reach a guest still booting
    are lost, the first few of a line (the kernel sets up its serial port while the typing
    goes on; seen on a TCG boot: "echo " of "echo early-2" never arrived, the rest did), and
    "Running" is the domain's state, not the shell's. A console that lost keys for good would
    fail here, at the deadline."""
    from playwright.sync_api import expect

    deadline = time.monotonic() + LIMIT_S
    for attempt in itertools.count():
        page.keyboard.type(f"echo ready-$((100+{attempt}))")
        page.keyboard.press("Enter")
        answer = rows.locator("div", has_text=re.compile(rf"^\s*ready-{100 + attempt}\s*$"))
        try:
            expect(answer).to_have_count(1, timeout=ANSWER_MS)
            return
        except AssertionError:
            assert time.monotonic() < deadline, f"the shell never ran a whole line: {rows.inner_text()!r}"


def type_in_the_dashboards_console(url: str, token: str, vm: str) -> None:
    """Sign in as an operator, open the VM's console, and run a command typed into xterm.js."""
    from playwright.sync_api import expect

    limit_ms = LIMIT_S * 1000  # guards a hang only
    with chromium() as browser, checked_page(browser) as page:
        sign_in(page, url, token)
        expect(page.locator("#whoami")).to_have_text("web-operator · operator")
        row = page.locator(f'#vms tr[data-name="{vm}"]')
        expect(row.locator("td.phase")).to_have_text("Running")
        row.locator("button.menu-toggle").click()  # the VM's actions are in its menu
        row.locator('button[data-action="console"]').click()
        expect(page.locator("#console-status")).to_have_text("attached")
        rows = page.locator("#console-terminal .xterm-rows")
        page.locator("#console-terminal").click()
        the_shell_takes_whole_lines(page, rows)
        page.keyboard.type("echo vp-$((6*7))")
        page.keyboard.press("Enter")
        expect(rows).to_contain_text("echo vp-$((6*7))")
        answer = rows.locator("div", has_text=re.compile(r"^\s*vp-42\s*$"))  # the answer's line
        expect(answer).to_have_count(1, timeout=limit_ms)
        page.click("#console-detach")
        expect(page.locator("#console-panel")).to_be_hidden()
