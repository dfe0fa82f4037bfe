"""Rows 15 and 16: a host fails, and its must-run VM runs on the other host, fenced through
sushy-tools' Redfish emulator (the BMC of ``tests/qemu/bmc.py``, as in
``tests/qemu/test_fencing_qemu.py``).

Daemon a stops answering (SIGSTOP: its guest's QEMU goes on running, as in a partition); the
control plane finds it silent, fences it through the BMC (a power cut: the guest dies) and
boots the guest on b from its shared disk. Timed from the SIGSTOP until the guest's second
``GUEST-UP`` on its console (the boot on b). Row 15 uses the fencing test's aggressive
settings, row 16 the defaults (a short run measures row 15 only: row 16's defaults wait a
minute or more, and ``real_bounds`` says what they add).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from tests.qemu.bmc_rig import PASSWORD, SETTINGS, USER, Bmc, bmc_running
from tests.qemu.conftest import Rig

from bench import real_bounds as rb
from bench.real_rig import RealRig, accelerator_used, console_count, control_plane
from bench.rows import Row
from bench.sizes import Sizes
from virtplane.domain.resources import Host, RunPolicy, VMPhase
from virtplane.drivers.errors import HostUnreachable

FAILOVER_LIMIT_S = 400.0  # guards against a hang only: the defaults need 25 s and more


def _libvirtd(rig: Rig) -> int:
    return int((rig.base / "hosts" / "a" / "libvirtd.pid").read_text())


@contextlib.asynccontextmanager
async def restored(rig: Rig, bmc: Bmc, driver: Any) -> AsyncIterator[None]:
    """Daemon a answers again afterwards, whatever happened (the cleanup and the next rows use
    it): continued if only stopped, powered on through its BMC if cut, and ``driver`` (this
    process's own connection to it) reconnected."""
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(_libvirtd(rig), signal.SIGCONT)
        if await bmc.power_state() == "Off":
            await bmc.power("On")
        deadline = time.monotonic() + 60
        while True:
            try:
                await driver.list_domains()
                break
            except HostUnreachable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def fencing_configured(qplane: Any, bmc: Bmc) -> None:
    async with qplane.api() as api:
        secret = {
            "kind": "Secret",
            "metadata": {"name": "bmc-a"},
            "spec": {"username": USER, "password": PASSWORD},
        }
        answer = await api.post("/v1/secrets", json=secret)
        if answer.status_code != 201:
            raise RuntimeError(f"POST /v1/secrets: {answer.status_code} {answer.text}")
        redfish = {"address": bmc.url, "system_id": bmc.system, "credentials_secret": "bmc-a"}
        answer = await api.patch("/v1/hosts/a", json={"spec": {"fencing": {"redfish": redfish}}})
        if answer.status_code != 200:
            raise RuntimeError(f"PATCH /v1/hosts/a: {answer.status_code} {answer.text}")


async def measure_failover(
    real: RealRig, number: int, defaults: bool, sizes: Sizes, boot_s: float | None
) -> Row:
    label = "default" if defaults else "aggressive"
    if defaults and not sizes.real_failover_defaults:
        return rb.not_measured(
            number,
            f"Host failure to its must-run VM up elsewhere, fenced through Redfish ({label} settings)",
            "x what the settings allow",
            f"<= {rb.FAILOVER_TARGET:g}, and <= {rb.FAILOVER_LIMIT_S[label]:g} s",
            "short run: the defaults add 13 s of fencing.after_s, a probe timeout of 5 s instead of 2 and "
            "up to 10 s more to the next look at the host (host.liveness.probe_interval_s) to row 15's "
            "time; a full run measures it",
        )
    rig = real.rig
    with bmc_running(rig, real.work / f"bmc-{number}") as bmc:
        async with control_plane(real, f"row{number}", {} if defaults else dict(SETTINGS)) as qplane:
            settings = qplane.plane.settings
            failover = rb.Failover(
                settings.get_float("host.liveness.disconnected_after_s"),
                settings.get_float("host.fencing.after_s"),
                None,
            )
            await qplane.add_host("a")
            await qplane.add_volume("fx-root")
            qplane.add_vm("fx", RunPolicy.ALWAYS_ON, "fx-root")
            await qplane.wait_settled("fx", VMPhase.RUNNING)
            await qplane.add_host("b")  # after the guest is placed: it runs on a
            log = real.console_log(qplane.domain("fx"))
            await console_count(log, "TICK 1")
            await fencing_configured(qplane, bmc)
            async with restored(rig, bmc, real.drivers["a"]):
                silent_at = datetime.now(UTC)
                started = time.monotonic()
                os.kill(_libvirtd(rig), signal.SIGSTOP)  # a answers nobody; its guest runs on
                seen = await console_count(log, "GUEST-UP", count=2, limit_s=FAILOVER_LIMIT_S)
            measured = seen - started
            host = qplane.vm("fx").status.host
            accelerator = accelerator_used(qplane, host or "b")
            events = {
                e.reason: round((e.time - silent_at).total_seconds(), 2)
                for e in qplane.store.list_events(kind="Host", name="a")
                if e.time is not None and e.time >= silent_at
            }
            fence = qplane.store.get(Host, "a").status.fence
    failover = rb.Failover(failover.disconnected_after_s, failover.fence_after_s, measured)
    row = rb.failover_row(number, label, failover, boot_s, accelerator)
    row.details.update(
        {
            "host_events_s_after_silent": events,
            "fence": fence.phase.value if fence else None,
            "ran_on": host,
        }
    )
    return row
