"""Host failure on real parts (issue 15): a real libvirt daemon whose BMC is sushy-tools' Redfish
emulator, started by the test on a loopback port, with a systems driver that powers the
daemon and its QEMU guests off for real (``tests/qemu/bmc.py``).

Daemon a stops answering (SIGSTOP: a partition in which its guest goes on running, since
QEMU is not stopped). virtplane fences a through Redfish only once the BMC is configured
right: an address where no BMC answers, a system id the BMC does not have and rejected
credentials each leave the reason on the host and on the VM, and the guest where it was.
With the right credentials the BMC cuts a's power, and the guest boots on daemon b from the
same shared disk. When a is powered on again through its BMC, its stale domain is destroyed
and undefined, never started (QEMU's own log on a shows one start only).

Throughout, which daemon runs a QEMU process for the guest is sampled from /proc (each QEMU
is a child of its daemon's subreaper): never two at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import eventually
from virtplane.domain.conditions import VMCondition, get_condition
from virtplane.domain.intents import read_intents
from virtplane.domain.resources import (
    ConditionStatus,
    FencePhase,
    Host,
    HostConnection,
    RunPolicy,
    VMPhase,
)
from virtplane.drivers.base import DomainState
from virtplane.drivers.errors import HostUnreachable

from .bmc_rig import PASSWORD, SETTINGS, USER, Bmc, bmc_running, free_port
from .conftest import Rig, console_shows
from .plane import LIMIT_S, QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


@pytest.fixture
def bmc(rig: Rig, tmp_path: Path) -> Iterator[Bmc]:
    """Daemon a's BMC, behind basic authentication."""
    try:
        import bcrypt  # noqa: F401
        import sushy_tools  # noqa: F401
    except ImportError as exc:
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(f"{exc.name} is not installed (pip install -e '.[test]')")
        pytest.skip(f"{exc.name} is not installed")
    with bmc_running(rig, tmp_path) as bmc:
        yield bmc


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


def qemu_hosts(rig: Rig, domain: str) -> list[str]:
    """The daemons that have a QEMU process for ``domain`` (its parent is their subreaper)."""
    machines = {_pid(rig.base / "hosts" / name / "subreaper.pid"): name for name in rig.hosts}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"qemu-system-x86_64") and f"guest={domain},".encode() in b" ".join(argv):
                found.append(machines.get(_parent(int(proc.name)), f"pid {proc.name}"))
    return sorted(found)


@dataclass
class Watcher:
    """Where the guest's QEMU runs, sampled until stopped: a history, not a moment."""

    rig: Rig
    domain: str
    history: list[list[str]] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            hosts = await asyncio.to_thread(qemu_hosts, self.rig, self.domain)
            if not self.history or self.history[-1] != hosts:
                self.history.append(hosts)
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def watching(rig: Rig, domain: str) -> AsyncIterator[Watcher]:
    watcher = Watcher(rig, domain)
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def daemon_restored(rig: Rig, bmc: Bmc) -> AsyncIterator[None]:
    """Whatever happens, daemon a answers again afterwards (the rig serves the next tests)."""
    try:
        yield
    finally:
        libvirtd = _pid(rig.base / "hosts" / "a" / "libvirtd.pid")
        if libvirtd is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(libvirtd, signal.SIGCONT)
        if await bmc.power_state() == "Off":
            await bmc.power("On")


def _host_events(qplane: QemuPlane, host: str) -> list[str]:
    return [e.reason for e in qplane.store.list_events(kind="Host", name=host)]


async def _defined_on_a(qplane: QemuPlane, vm: str) -> bool:
    """Asked of daemon a directly, once the test's own connection to it is back."""
    while True:
        with contextlib.suppress(HostUnreachable):
            return await qplane.info("a", vm) is not None
        await asyncio.sleep(0.1)


def _fence(qplane: QemuPlane) -> tuple[str, str]:
    fence = qplane.store.get(Host, "a").status.fence
    return (fence.phase.value, fence.reason) if fence else ("", "")


def _waits_because(qplane: QemuPlane, vm: str) -> str:
    condition = get_condition(qplane.vm(vm).status.conditions, VMCondition.HOST_REACHABLE)
    return condition.reason if condition and condition.status is ConditionStatus.FALSE else ""


async def test_a_silent_daemon_is_fenced_through_redfish_and_its_guest_runs_on_the_other(
    qplane: QemuPlane, bmc: Bmc
) -> None:
    rig = qplane.rig
    for key, value in SETTINGS.items():
        qplane.plane.settings.set(key, value)
    await qplane.add_host("a")
    await qplane.add_volume("fx-root")
    qplane.add_vm("fx", RunPolicy.ALWAYS_ON, "fx-root")
    await qplane.wait_settled("fx", VMPhase.RUNNING)
    await qplane.add_host("b")  # after the guest is placed: it runs on a
    domain = qplane.domain("fx")
    assert qplane.vm("fx").status.host == "a" and qemu_hosts(rig, domain) == ["a"]
    await console_shows(rig, domain, "TICK 1")

    unreachable = f"http://127.0.0.1:{free_port()}"
    async with qplane.api() as api:
        secret = {
            "kind": "Secret",
            "metadata": {"name": "bmc-a"},
            "spec": {"username": USER, "password": "wrong"},
        }
        assert (await api.post("/v1/secrets", json=secret)).status_code == 201
        redfish = {"address": unreachable, "system_id": "no-such-system", "credentials_secret": "bmc-a"}
        answer = await api.patch("/v1/hosts/a", json={"spec": {"fencing": {"redfish": redfish}}})
        assert answer.status_code == 200, answer.text

        async def configure(**change: str) -> httpx.Response:
            redfish.update(change)
            return await api.patch("/v1/hosts/a", json={"spec": {"fencing": {"redfish": redfish}}})

        libvirtd = _pid(rig.base / "hosts" / "a" / "libvirtd.pid")
        assert libvirtd is not None
        async with watching(rig, domain) as watcher:
            async with daemon_restored(rig, bmc):
                os.kill(libvirtd, signal.SIGSTOP)  # a answers nobody; its guest runs on

                # Bad BMC settings, each fixed in turn (a BMC authenticates before it looks for
                # the system): the reason on the host and the VM, no recovery, the guest where it was.
                password = {"spec": {"username": USER, "password": PASSWORD}}
                for reason, fix in (
                    ("BmcUnreachable", lambda: configure(address=bmc.url)),
                    ("BmcCredentialsRejected", lambda: api.patch("/v1/secrets/bmc-a", json=password)),
                    ("BmcSystemNotFound", lambda: configure(system_id=bmc.system)),
                ):
                    await eventually(
                        lambda reason=reason: _fence(qplane) == ("Retrying", reason), timeout=LIMIT_S
                    )  # type: ignore[misc]
                    await eventually(
                        lambda reason=reason: _waits_because(qplane, "fx") == reason, timeout=LIMIT_S
                    )  # type: ignore[misc]
                    vm = qplane.vm("fx")
                    assert vm.status.host == "a" and read_intents(vm.metadata.annotations).recovery is None
                    assert not qplane.store.get(Host, "a").spec.fenced
                    assert qemu_hosts(rig, domain) == ["a"] and await bmc.power_state() == "On"
                    assert (await fix()).status_code == 200
                ticks = qplane.console("fx").count("TICK")
                await console_shows(rig, domain, "TICK", count=ticks + 1)  # the guest never stopped

                await eventually(lambda: qplane.store.get(Host, "a").spec.fenced, timeout=LIMIT_S)
                assert await bmc.power_state() == "Off" and "a" not in qemu_hosts(rig, domain)
                host = qplane.store.get(Host, "a")
                assert host.status.connection is HostConnection.DOWN
                assert host.status.fence is not None and host.status.fence.phase is FencePhase.FENCED

                await eventually(lambda: qplane.settled("fx", VMPhase.RUNNING), timeout=LIMIT_S)
                assert qplane.vm("fx").status.host == "b"
                await console_shows(rig, domain, "GUEST-UP", count=2)  # booted again, on b
                on_b = await qplane.info("b", "fx")  # a is powered off: no daemon there to ask
                assert on_b is not None and on_b.state is DomainState.RUNNING
                reasons = [reason for reason, _ in qplane.events("fx")]
                assert "RecoveryStarted" in reasons and reasons.count("Recovered") == 1

                # a returns (powered on through its BMC): its stale domain goes, never started.
                await bmc.power("On")
                await eventually(lambda: "StaleDomainRemoved" in _host_events(qplane, "a"), timeout=LIMIT_S)
                assert await _defined_on_a(qplane, "fx") is False, "undefined on a"
            starts = (rig.base / "hosts" / "a" / "log" / "qemu" / f"{domain}.log").read_text()
            assert starts.count("starting up") == 1, "QEMU on a was started once: the first boot"
            assert qemu_hosts(rig, domain) == ["b"] and qplane.console("fx").count("GUEST-UP") == 2
        assert watcher.history[0] == ["a"] and watcher.history[-1] == ["b"]
        assert all(len(hosts) <= 1 for hosts in watcher.history), f"on two hosts: {watcher.history}"
        assert qplane.store.get(Host, "a").spec.fenced, "a takes no VM until an admin clears the fence"
