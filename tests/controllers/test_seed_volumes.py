"""Old NoCloud seed volumes go (issue 14), on the simulator: a seed rebuilt for a new spec
replaces the old one in the pool, and a deleted VM takes its seed with it. Each seed file is
on the VM's record (``virtplane.io/seed-volumes``) before it is written, and leaves the
record only once deleted (DESIGN.md §1).
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from tests.conftest import LiveServer, eventually_sync, wait_json
from virtplane.domain.resources import VirtualMachine
from virtplane.domain.seeds import SEED_VOLUMES, SeedVolume, read_seed_volumes
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimFaultError
from virtplane.seed_iso import read_seed_iso


def _setup(admin: Any, cloud_init: dict[str, Any] | None = None) -> None:
    docs = [
        ("hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}),
        ("storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 50}}),
        ("volumes", {"metadata": {"name": "root"}, "spec": {"pool": "shared", "size_gib": 1}}),
        ("vms", {"metadata": {"name": "web"}, "spec": {"disks": [{"volume": "root"}], "cloud_init": {"user_data": "#cloud-config\n"}}}),
    ]  # fmt: skip
    if cloud_init is not None:
        docs[-1][1]["spec"]["cloud_init"] = cloud_init
    for plural, doc in docs:
        created = admin.post(f"/v1/{plural}", json=doc)
        assert created.status_code == 201, created.text


def _exists(live_server: LiveServer, path: str) -> bool:
    try:
        live_server.in_loop(live_server.plane.sim.read_volume, path)
    except SimFaultError:
        return False
    return True


def _seed_path(live_server: LiveServer, uid: str) -> str | None:
    domain = live_server.plane.sim.host_named("h1").domains.get(domain_name(uid))
    return domain.spec.seed if domain is not None else None


def _recorded(live_server: LiveServer) -> list[SeedVolume]:
    vm = live_server.store.find(VirtualMachine, "web")
    return read_seed_volumes(vm.metadata.annotations) if vm is not None else []


def test_a_rebuilt_seed_replaces_the_old_volume_and_a_deleted_vm_takes_its_seed(
    live_server: LiveServer,
) -> None:
    with live_server.client("admin") as admin:
        _setup(admin)
        uid = wait_json(admin, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running")["metadata"]["uid"]
        first = eventually_sync(lambda: _seed_path(live_server, uid))
        assert _exists(live_server, first)
        assert _recorded(live_server) == [SeedVolume("shared", first.rsplit("/", 1)[1])]

        # a new spec: the running guest keeps its CD-ROM; once off, the domain is defined again
        # with a new seed, and the old one goes
        patch = {"spec": {"cloud_init": {"user_data": "#cloud-config\nhostname: other\n"}}}
        assert admin.patch("/v1/vms/web", json=patch).status_code == 200
        stop = {"metadata": {"name": "stop-web"}, "spec": {"vm": "web", "type": "Stop"}}
        assert admin.post("/v1/operations", json=stop).status_code == 201
        wait_json(admin, "/v1/operations/stop-web", lambda o: o["status"]["phase"] == "Completed")
        second = eventually_sync(lambda: (path := _seed_path(live_server, uid)) != first and path)
        assert _exists(live_server, second)
        eventually_sync(lambda: not _exists(live_server, first))
        eventually_sync(lambda: _recorded(live_server) == [SeedVolume("shared", second.rsplit("/", 1)[1])])
        assert SEED_VOLUMES in live_server.store.get(VirtualMachine, "web").metadata.annotations

        assert admin.delete("/v1/vms/web").status_code in (200, 202)
        eventually_sync(lambda: admin.get("/v1/vms/web").status_code == 404)
        assert not _exists(live_server, second)


def test_the_seed_the_guest_reads_carries_its_ssh_keys_hostname_and_user_data(
    live_server: LiveServer,
) -> None:
    """The ISO as uploaded to the host's pool, read back with pycdlib, holds what the spec says,
    literally (not compared with the control plane's own rendering of it)."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 me@laptop"
    user_data = "#cloud-config\nruncmd: [[touch, /seeded]]\n"
    with live_server.client("admin") as admin:
        _setup(admin, {"user_data": user_data, "ssh_authorized_keys": [key]})
        uid = wait_json(admin, "/v1/vms/web", lambda v: v["status"]["phase"] == "Running")["metadata"]["uid"]
        path = eventually_sync(lambda: _seed_path(live_server, uid))
        content = live_server.in_loop(live_server.plane.sim.read_volume, path)
    label, files = read_seed_iso(base64.b64decode(content))
    assert label == "cidata"
    meta = yaml.safe_load(files["meta-data"])
    assert meta["public-keys"] == [key]
    assert meta["local-hostname"] == "web" and meta["instance-id"] == uid
    assert files["user-data"] == user_data.encode()
