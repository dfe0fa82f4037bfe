"""Daemon a's BMC for the real-parts tests and benchmarks: sushy-tools' Redfish emulator with
the systems driver of ``tests/qemu/bmc.py``, on a loopback port behind basic authentication,
and the aggressive fencing settings the fencing test and bench row 15 use."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from .conftest import REPO, Rig

USER, PASSWORD = "admin", "bmc-pa55word"
SYSTEM = "rig-host-a"
SETTINGS = {
    "host.liveness.probe_timeout_s": 2.0,
    "host.liveness.disconnected_after_s": 1.0,
    "host.liveness.reconnected_after_s": 2.0,
    "host.fencing.after_s": 2.0,
    "host.fencing.retry_base_s": 0.2,
    "host.fencing.retry_cap_s": 1.0,
    "host.fencing.timeout_s": 5.0,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Bmc:
    url: str
    system: str

    async def power(self, action: str) -> None:
        """What an admin does at the BMC (the control plane has its own client, sushy)."""
        async with httpx.AsyncClient(auth=(USER, PASSWORD), timeout=60) as client:
            answer = await client.post(
                f"{self.url}/redfish/v1/Systems/{self.system}/Actions/ComputerSystem.Reset",
                json={"ResetType": action},
            )
        assert answer.status_code == 204, answer.text

    async def power_state(self) -> str:
        async with httpx.AsyncClient(auth=(USER, PASSWORD), timeout=10) as client:
            answer = await client.get(f"{self.url}/redfish/v1/Systems/{self.system}")
        assert answer.status_code == 200, answer.text
        return str(answer.json()["PowerState"])


@contextlib.contextmanager
def bmc_running(rig: Rig, work: Path) -> Iterator[Bmc]:
    """Daemon a's BMC on a loopback port, behind basic authentication, until the block ends."""
    import bcrypt

    work.mkdir(parents=True, exist_ok=True)
    htpasswd = work / "htpasswd"
    htpasswd.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt()).decode()}\n")
    config = work / "bmc.conf"
    config.write_text(
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(work / 'state')!r}\n"
        f"VIRTPLANE_BMC_SYSTEM = {SYSTEM!r}\n"
        f"VIRTPLANE_BMC_HOST_DIR = {str(rig.base / 'hosts' / 'a')!r}\n"
        f"VIRTPLANE_BMC_POWER_ON = {rig.start_command('a')!r}\n"
    )
    port = free_port()
    with (work / "bmc.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.qemu.bmc", str(config), str(port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the BMC exited: {(work / 'bmc.log').read_text()[-500:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/redfish/v1/Systems/{SYSTEM}", auth=(USER, PASSWORD)).is_success:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("the BMC did not answer within 30 s")
            time.sleep(0.1)
        yield Bmc(url, SYSTEM)
    finally:
        proc.terminate()
        proc.wait(10)
