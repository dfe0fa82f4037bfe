"""Issue 34's linked clones on a real libvirt daemon: a template whose disk holds a marker,
cloned with ``linked``, and a snapshot of it as well. Each clone's volume is a qcow2 overlay
whose backing file is the template's volume or the disk the snapshot saved (``qemu-img info``
says so), and each clone boots from it (its console shows the template's marker)."""

from __future__ import annotations

import json
import subprocess

import pytest

from virtplane.domain.resources import RunPolicy, VMPhase, Volume

from .conftest import console_shows
from .plane import LIMIT_S, SHARED, QemuPlane, disk0, write_marker

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


async def test_a_linked_clone_is_an_overlay_on_the_template_and_boots(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    gold = await qplane.add_volume("gold-root", SHARED)
    write_marker(gold.status.path, ord("L"))  # no VM runs on it
    qplane.add_vm("gold", RunPolicy.ALWAYS_OFF, "gold-root", template=True)
    await qplane.wait_settled("gold", VMPhase.STOPPED)
    snapshot = await qplane.snapshot("gold")
    (saved,) = snapshot.status.disk_snapshots
    async with qplane.api() as api:
        for name, source in (
            ("thin", {"template": "gold"}),
            ("thin-snap", {"snapshot": snapshot.metadata.name}),
        ):
            answer = await api.post(
                "/v1/vms/actions/create",
                json={"names": [name], "linked": True, "run_policy": "AlwaysOn", **source},
            )
            assert answer.status_code == 201, answer.text

    for name, backing in (("thin", gold.status.path), ("thin-snap", saved.handle)):
        await qplane.wait_settled(name, VMPhase.RUNNING)
        await console_shows(qplane.rig, qplane.domain(name), disk0(ord("L")), limit_s=LIMIT_S)
        overlay = qplane.store.get(Volume, f"{name}-root").status.path
        info = json.loads(
            subprocess.run(
                ["qemu-img", "info", "-U", "--output=json", overlay],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        assert (info["format"], info["backing-filename"]) == ("qcow2", backing), name
        assert info.get("backing-filename-format") == "qcow2"
