"""Usage on real libvirt (TCG): a guest that burns CPU and writes its disk shows it in its usage
and in what ``virtplane top`` lists, within two collection rounds of the leader's own loop.

The busybox guest with ``vp.dirty=N`` rewrites N MiB of RAM from /dev/urandom without pause
(CPU-bound under TCG), and every 2 s writes a sector of /dev/vda with fsync (block I/O).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import eventually
from virtplane.cli.top import Kind, table
from virtplane.domain.resources import RunPolicy, VMPhase

from .conftest import console_shows
from .plane import QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def test_a_busy_guest_shows_in_its_usage_and_in_top_within_two_rounds(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_volume("burn-root")
    qplane.add_vm("burn", RunPolicy.ALWAYS_ON, "burn-root", cmdline="vp.dirty=16")
    await qplane.wait_settled("burn", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("burn"), "TICK 2")  # burning, and writing its disk
    uid = qplane.vm("burn").metadata.uid
    usage = qplane.plane.usage
    rounds = 2.0 * usage.interval_s
    started = time.monotonic()

    def busy() -> bool:
        now = usage.vms.get(uid)
        return (
            now is not None
            and usage.fresh(now.tick)
            and now.rates.of("cpu_pct") > 30  # NaN (no figure yet) compares False
            and now.rates.of("disk_write_iops") > 0
        )

    await eventually(busy, timeout=rounds + 5.0, interval=0.2)  # the leader's loop, not ours
    assert time.monotonic() - started <= rounds + 5.0

    transport = httpx.ASGITransport(app=qplane.plane.app())
    token = qplane.store.create_token("usage-qemu", "viewer")
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane", headers=headers) as client:
        history = (await client.get("/v1/vms/burn/usage", params={"since": "5m"})).json()
        top = (await client.get("/v1/usage/vms", params={"sort": "cpu"})).json()
    assert history["host"] == "a" and max(v for v in history["cpu_pct"] if v is not None) > 30
    assert history["current"]["disks"][0]["name"] == "vda"
    assert history["current"]["disks"][0]["write_iops"] > 0
    assert history["memory_used_mib"][-1] > 0  # QEMU's RSS: the busybox guest has no balloon stats
    assert top["items"][0]["name"] == "burn" and top["items"][0]["cpu_pct"] > 30
    rendered = table(Kind.VMS, top)
    assert rendered.row_count == 1
