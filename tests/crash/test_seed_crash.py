"""A seed file is on the VM's record before it reaches a host (DESIGN.md §1): SIGKILL the server
right after a new seed was written (``vm.seed-written``), find the file on the VM's record in
the store, and see the restarted server delete the old seed, and the new one with the VM.
The store and the simulated hosts (``sim.db``) are read from the data directory while the
server is dead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.crash.server import ServerProcess, intents_left
from tests.crash.test_kill_restart import finished, operation, post
from virtplane.controllers.seed import vm_seed
from virtplane.domain.resources import VirtualMachine
from virtplane.domain.seeds import SeedVolume, read_seed_volumes
from virtplane.drivers.sim import SimCloud, SimFaultError
from virtplane.store.store import Store, sqlite_url


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "data", shutdown_s=0.05)
    yield proc
    proc.stop()


def settled(phase: str) -> Any:
    """In ``phase`` with no intent left (the seed record is no power intent)."""

    def check(vm: dict[str, Any]) -> bool:
        return bool(vm["status"]["phase"] == phase and not intents_left(vm))

    return check


def _offline(server: ServerProcess) -> tuple[list[SeedVolume], str, set[str]]:
    """With the server dead: the VM's seed record, the file of its current spec's seed, and
    which of the recorded and current seed files the simulated pool holds."""
    store = Store(sqlite_url(server.data_dir / "virtplane.db"))
    vm = store.get(VirtualMachine, "a")
    current = vm_seed(vm, {})
    assert current is not None
    recorded = read_seed_volumes(vm.metadata.annotations)
    sim = SimCloud(state_path=server.data_dir / "sim.db")
    present = set()
    for file in {current.file_name} | {seed.file for seed in recorded}:
        with contextlib.suppress(SimFaultError):
            sim.read_volume(f"sim://shared/{file}")
            present.add(file)
    return recorded, current.file_name, present


def test_a_seed_written_before_a_crash_is_on_the_record_and_deleted_later(server: ServerProcess) -> None:
    server.start()
    with server.client() as c:
        post(c, "/v1/hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}})
        post(c, "/v1/storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "default", "capacity_gib": 10}})  # fmt: skip
        post(c, "/v1/volumes", {"metadata": {"name": "a-root"}, "spec": {"pool": "shared", "size_gib": 1}})
        post(c, "/v1/vms", {"metadata": {"name": "a"}, "spec": {"disks": [{"volume": "a-root"}], "cloud_init": {"user_data": "#!/bin/sh\n"}}})  # fmt: skip
    server.wait_for("/v1/vms/a", settled("Running"))
    operation(server, "stop-a", "a", "Stop")
    server.wait_for("/v1/operations/stop-a", finished)
    server.wait_for("/v1/vms/a", settled("Stopped"))
    server.stop()
    (old,), old_file, _ = _offline(server)

    server.start(crash_at="vm.seed-written")
    # the off domain is defined again at once: the response may not leave
    with contextlib.suppress(httpx.TransportError), server.client() as c:
        patched = c.patch("/v1/vms/a", json={"spec": {"cloud_init": {"user_data": "#!/bin/sh\necho 2\n"}}})
        assert patched.status_code == 200, patched.text
    assert server.wait_killed() == -9, "the server died at the crash point"
    recorded, new_file, present = _offline(server)
    assert new_file != old_file
    assert present == {old_file, new_file}, "the new seed was written before the crash"
    assert SeedVolume("shared", new_file) in recorded, "and it was on the record before that"
    assert old in recorded

    server.start()
    with server.client() as c:
        server.wait_for(
            "/v1/vms/a", lambda vm: vm["metadata"]["generation"] == vm["status"]["observed_generation"]
        )
        assert c.delete("/v1/vms/a").status_code in (200, 202)
        server.wait_for("/v1/volumes/a-root", lambda _: c.get("/v1/vms/a").status_code == 404)
    server.stop()
    store = Store(sqlite_url(server.data_dir / "virtplane.db"))
    assert store.find(VirtualMachine, "a") is None
    sim = SimCloud(state_path=server.data_dir / "sim.db")
    for file in (old_file, new_file):
        with pytest.raises(SimFaultError):
            sim.read_volume(f"sim://shared/{file}")


def _local_seeds(server: ServerProcess) -> tuple[list[SeedVolume], dict[str, set[str]]]:
    """With the server dead: the VM's seed record, and which seed files each host's local pool holds."""
    store = Store(sqlite_url(server.data_dir / "virtplane.db"))
    vm = store.get(VirtualMachine, "a")
    recorded = read_seed_volumes(vm.metadata.annotations)
    sim = SimCloud(state_path=server.data_dir / "sim.db")
    present: dict[str, set[str]] = {"h1": set(), "h2": set()}
    for host, files in present.items():
        for seed in recorded:
            with contextlib.suppress(SimFaultError):
                sim.read_volume(f"sim://local/{seed.file}", host=host)
                files.add(seed.file)
    return recorded, present


def test_a_seed_copied_to_a_migration_target_is_on_the_record_before_a_crash(server: ServerProcess) -> None:
    """``migration.seed-copied``: a local-disk VM's seed is on its target (h2) before its block
    migration begins; the server dies there. The copy was on the VM's record first, so the
    restarted server's migration ends with the VM's seed on h2 only, and deleting the VM takes it."""
    server.start()
    with server.client() as c:
        for host in ("h1", "h2"):
            post(c, "/v1/hosts", {"metadata": {"name": host}, "spec": {"uri": f"sim://{host}"}})
            post(c, "/v1/storagepools", {"metadata": {"name": f"{host}-local"}, "spec": {"kind": "local", "host": host, "driver_pool": "local", "capacity_gib": 10}})  # fmt: skip
        post(c, "/v1/volumes", {"metadata": {"name": "a-root"}, "spec": {"pool": "h1-local", "size_gib": 1}})
        post(c, "/v1/vms", {"metadata": {"name": "a"}, "spec": {"disks": [{"volume": "a-root"}], "cloud_init": {"user_data": "#!/bin/sh\n"}}})  # fmt: skip
    server.wait_for(
        "/v1/vms/a", lambda vm: vm["status"]["phase"] == "Running" and vm["status"]["host"] == "h1"
    )
    server.stop()
    ((placed,), _) = _local_seeds(server)

    server.start(crash_at="migration.seed-copied")
    with contextlib.suppress(httpx.TransportError):  # the migration begins at once: the answer may not leave
        operation(server, "move-a", "a", "Migrate", migrate={"target_host": "h2"})
    assert server.wait_killed() == -9, "the server died at the crash point"
    recorded, present = _local_seeds(server)
    assert present == {"h1": {placed.file}, "h2": {placed.file}}, "the copy was written before the crash"
    assert recorded == [placed, SeedVolume("h2-local", placed.file)], "and it was on the record before that"

    server.start()
    server.wait_for("/v1/operations/move-a", finished)
    server.wait_for("/v1/vms/a", lambda vm: vm["status"]["host"] == "h2" and not intents_left(vm))
    server.stop()
    recorded, present = _local_seeds(server)
    assert recorded == [SeedVolume("h2-local", placed.file)]
    assert present == {"h1": set(), "h2": {placed.file}}

    server.start()
    with server.client() as c:
        assert c.delete("/v1/vms/a").status_code in (200, 202)
        server.wait_for("/v1/volumes/a-root", lambda _: c.get("/v1/vms/a").status_code == 404)
    server.stop()
    sim = SimCloud(state_path=server.data_dir / "sim.db")
    with pytest.raises(SimFaultError):
        sim.read_volume(f"sim://local/{placed.file}", host="h2")
