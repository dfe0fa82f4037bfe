"""A Redfish BMC for one of the rig's libvirt daemons: sushy-tools' emulator, with a systems
driver of our own whose power actions are real.

The daemon's machine is its subreaper (``scripts/qemu/subreaper.py``): libvirtd and every
QEMU process it started are the subreaper's children. The system is On while the subreaper
lives. ForceOff is a power cut: SIGKILL to every child (libvirtd too, stopped or not: a
stopped process dies of SIGKILL), after which the subreaper exits; nothing is shut down in
order and no guest gets to say goodbye. On runs the daemon's start command again (its
domains come back defined and shut off, as after a power cut). The emulator reads power
state from the processes on every request, so an Off it reports is an Off that happened.

Run as ``python -m tests.qemu.bmc CONFIG PORT`` (it listens on 127.0.0.1); CONFIG holds the
emulator's settings (``SUSHY_EMULATOR_AUTH_FILE``, ``SUSHY_EMULATOR_STATE_DIR``) and ours:
``VIRTPLANE_BMC_SYSTEM`` (the system's id), ``VIRTPLANE_BMC_HOST_DIR`` (the daemon's
directory, holding ``subreaper.pid``) and ``VIRTPLANE_BMC_POWER_ON`` (argv that starts it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sushy_tools import error
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems.base import AbstractSystemsDriver

POWER_OFF_LIMIT_S = 10.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with open(task / "children") as children:
            found += [int(child) for child in children.read().split()]
    return found


class DaemonSystem(AbstractSystemsDriver):
    """One ComputerSystem: the daemon of ``VIRTPLANE_BMC_HOST_DIR``."""

    _config: Any

    def __init__(self) -> None:
        self.system = str(self._config["VIRTPLANE_BMC_SYSTEM"])
        self.host_dir = Path(self._config["VIRTPLANE_BMC_HOST_DIR"])
        self.power_on = list(self._config["VIRTPLANE_BMC_POWER_ON"])

    @property
    def driver(self) -> str:
        return "<virtplane test daemon>"

    @property
    def systems(self) -> list[str]:
        return [self.system]

    def _known(self, identity: str) -> None:
        if identity != self.system:
            raise error.NotFound(f"no system {identity}")

    def uuid(self, identity: str) -> str:
        self._known(identity)
        return self.system

    def name(self, identity: str) -> str:
        self._known(identity)
        return self.host_dir.name

    def _machine(self) -> int | None:
        """The subreaper's pid while the machine is on."""
        try:
            pid = int((self.host_dir / "subreaper.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def get_power_state(self, identity: str) -> str:
        self._known(identity)
        return "On" if self._machine() is not None else "Off"

    def set_power_state(self, identity: str, state: str) -> None:
        self._known(identity)
        machine = self._machine()
        if state == "ForceOff":
            if machine is not None:
                self._cut_power(machine)
        elif state in ("On", "ForceOn"):
            if machine is None:
                subprocess.run(self.power_on, check=True, capture_output=True)
        else:
            raise error.NotSupportedError(f"power action {state} is not supported by this BMC")

    def _cut_power(self, machine: int) -> None:
        deadline = time.monotonic() + POWER_OFF_LIMIT_S
        while _alive(machine):
            for child in _children(machine):
                os.kill(child, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise error.FishyError(f"the machine (pid {machine}) is still up")
            time.sleep(0.02)

    def get_boot_device(self, identity: str) -> str:
        self._known(identity)
        return "Hdd"

    def set_boot_device(self, identity: str, boot_source: str) -> None:
        raise error.NotSupportedError("boot devices are not emulated")


def main(config_file: str, port: int) -> None:
    app = emulator.app
    app.configure(config_file=config_file)
    DaemonSystem.initialize(app.config, app.logger)
    system = DaemonSystem()
    # The emulator builds one of its own drivers from its configuration and offers no way to
    # name another: its property that builds the driver gives ours instead.
    emulator.Application.systems = property(lambda _: system)  # type: ignore[assignment,method-assign]
    app.run(host="127.0.0.1", port=port)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
