"""Data made by earlier releases, opened by the current code, then used as an operator would.

Each fixture is a data directory the old code itself wrote (``scripts/make-upgrade-fixtures``):
the demo, a VM booting a kernel from a volume copied from an image (host paths before the
image library), a VM its user stopped, snapshots with and without memory, and host-3 left
in maintenance. Before the data migrations (``store/migrations/data``) the first two
releases' data stopped the server at start, and the volumes of every release before the
image library had no ``status.file``: restores, snapshots, deletes and block migrations
worked on ``vp-<uid>``, a file that does not exist.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.conftest import wait_json
from tests.upgrade.conftest import (
    FINISHED,
    RELEASES,
    SIM_SCHEMA,
    WITH_HOST_PATHS,
    assert_claims_held,
    files,
    run_operation,
    said_by_virtplane,
    settled,
    upgraded,
)
from virtplane.domain.resources import Secret
from virtplane.drivers.sim._persist import SCHEMA_VERSION as SIM_SCHEMA_VERSION
from virtplane.store.migrations.data.d0002_host_paths import ANNOTATION_PREFIX, CONDITION

LEGACY_KERNEL = "/var/lib/virtplane/images/vmlinuz-6.1.0-amd64"


@pytest.mark.parametrize("release", RELEASES)
def test_old_data_is_served_whole(release: str, tmp_path: Path) -> None:
    with (
        said_by_virtplane() as said,
        upgraded(release, tmp_path) as (server, _),
        server.client("viewer") as viewer,
    ):
        current = str(SIM_SCHEMA_VERSION)
        upgraded_sim = any(f"schema {SIM_SCHEMA[release]} upgraded to {current}" in line for line in said)
        assert upgraded_sim == (SIM_SCHEMA[release] != current), f"the sim file's upgrade is said: {said}"
        assert any(
            line.startswith("store upgrade: data migration: data migrations 1, 2, 3 applied") for line in said
        ), said
        vms = {vm["metadata"]["name"]: vm for vm in viewer.get("/v1/vms").json()["items"]}
        old = {"web-1", "web-2", "app-1", "db-1", "batch-1", "archive-1", "legacy-1"}
        assert old <= set(vms), "every VM the old release had is there"
        assert vms["app-1"]["status"]["phase"] == "Stopped", "stopped by its user, it stays stopped"
        snapshots = {s["metadata"]["name"] for s in viewer.get("/v1/snapshots").json()["items"]}
        assert {"db-1-disk", "web-1-memory", "legacy-1-disk"} <= snapshots
        host = viewer.get("/v1/hosts/host-3").json()
        assert host["status"]["resource_state"] == "Maintenance", "the old maintenance holds"
        volumes = viewer.get("/v1/volumes").json()["items"]
        assert all(v["status"]["file"] for v in volumes if v["status"]["phase"] == "Ready"), volumes
        legacy = vms["legacy-1"]
        if release in WITH_HOST_PATHS:
            assert legacy["metadata"]["annotations"][ANNOTATION_PREFIX + "spec.boot.kernel"] == LEGACY_KERNEL
            (condition,) = [c for c in legacy["status"]["conditions"] if c["type"] == CONDITION]
            assert "spec.boot.kernel" in condition["message"] and "create Image" in condition["message"]
            events = viewer.get("/v1/events", params={"kind": "VirtualMachine", "name": "legacy-1"}).json()
            assert any(e["reason"] == "Upgraded" for e in events["items"]), events
        else:
            assert legacy["spec"]["boot"]["kernel"] == "vmlinuz-6-1", "an Image reference is left alone"
        assert_claims_held(server, viewer)


@pytest.mark.parametrize("release", RELEASES)
def test_old_snapshots_restore(release: str, tmp_path: Path) -> None:
    with upgraded(release, tmp_path) as (server, _), server.client("operator") as operator:
        settled(operator, "db-1")
        done = run_operation(
            operator, "restore-db-1", {"vm": "db-1", "type": "Restore", "restore": {"snapshot": "db-1-disk"}}
        )
        assert done["status"]["phase"] == "Completed", done["status"]
        settled(operator, "db-1")
        done = run_operation(
            operator,
            "restore-web-1",
            {"vm": "web-1", "type": "Restore", "restore": {"snapshot": "web-1-memory"}},
        )
        assert done["status"]["phase"] == "Completed", done["status"]
        vm = settled(operator, "web-1")
        memory = [c for c in vm["status"]["conditions"] if c["type"] == "MemoryRestored"]
        assert memory and memory[0]["status"] == "True", vm["status"]
        assert_claims_held(server, operator)


@pytest.mark.parametrize("release", RELEASES)
def test_a_new_snapshot_of_an_old_vm(release: str, tmp_path: Path) -> None:
    with upgraded(release, tmp_path) as (server, _), server.client("operator") as operator:
        settled(operator, "db-1")
        body = {"metadata": {"name": "db-1-after"}, "spec": {"vm": "db-1", "with_memory": True}}
        assert operator.post("/v1/snapshots", json=body).status_code == 201
        snapshot = wait_json(
            operator, "/v1/snapshots/db-1-after", lambda s: s["status"]["phase"] in ("Ready", "Failed")
        )
        assert snapshot["status"]["phase"] == "Ready", snapshot["status"]
        assert_claims_held(server, operator)


@pytest.mark.parametrize("release", RELEASES)
def test_deleting_an_old_vm_and_its_volume_leaves_no_file(release: str, tmp_path: Path) -> None:
    with upgraded(release, tmp_path) as (server, sim), server.client("operator") as operator:
        before = files(server, sim, "", "shared")
        assert operator.delete("/v1/vms/legacy-1").status_code in (200, 202)
        wait_json(operator, "/v1/vms/legacy-1", lambda v: v.get("reason") == "NotFound")
        assert operator.delete("/v1/volumes/legacy-root").status_code in (200, 202)
        wait_json(operator, "/v1/volumes/legacy-root", lambda v: v.get("reason") == "NotFound")
        after = files(server, sim, "", "shared")
        assert len(after) == len(before) - 1 and after < before, f"the volume's file is deleted: {after}"
        held = {v["status"]["file"] for v in operator.get("/v1/volumes").json()["items"]}
        assert after <= held, "every file left is a volume's"
        assert_claims_held(server, operator)  # the deleted VM's are released, no other


@pytest.mark.parametrize("release", RELEASES)
def test_a_block_migration_of_an_old_vm_leaves_no_copy_behind(release: str, tmp_path: Path) -> None:
    with upgraded(release, tmp_path) as (server, sim), server.client("operator") as operator:
        vm = settled(operator, "db-1")
        assert vm["status"]["host"] == "host-1"
        (file,) = files(server, sim, "host-1", "local")
        spec = {"vm": "db-1", "type": "Migrate", "migrate": {"target_host": "host-2"}}
        done = run_operation(operator, "move-db-1", spec)
        assert done["status"]["phase"] == "Completed", done["status"]
        assert settled(operator, "db-1")["status"]["host"] == "host-2"
        assert files(server, sim, "host-2", "local") == {file}, "the disk is copied under its name"
        assert files(server, sim, "host-1", "local") == set(), "the source copy is deleted"
        assert_claims_held(server, operator)


@pytest.mark.parametrize("release", RELEASES)
def test_the_old_maintenance_ends(release: str, tmp_path: Path) -> None:
    with upgraded(release, tmp_path) as (server, _), server.client("admin") as admin:
        assert admin.delete("/v1/hosts/host-3/maintenance").status_code in (200, 202, 204)
        host = wait_json(admin, "/v1/hosts/host-3", lambda h: h["status"]["resource_state"] == "Enabled")
        assert host["spec"].get("unschedulable") in (None, False)
        assert_claims_held(server, admin)


@pytest.mark.parametrize("release", WITH_HOST_PATHS)
def test_a_vm_booted_from_host_paths_waits_for_its_images_then_starts(release: str, tmp_path: Path) -> None:
    """The condition's remedy works: the VM runs on (its domain is defined), a restart waits for
    the Images it now names instead of booting another file, and starts once an admin made them."""
    with upgraded(release, tmp_path) as (server, _), server.client("admin") as admin:
        vm = settled(admin, "legacy-1")
        boot = vm["spec"]["boot"]
        disks = next(c for c in vm["status"]["conditions"] if c["type"] == "DisksReady")
        assert disks["status"] == "False" and f"image {boot['kernel']} does not exist" in disks["message"]
        restart = admin.post(
            "/v1/operations",
            json={"metadata": {"name": "restart-legacy-1"}, "spec": {"vm": "legacy-1", "type": "Restart"}},
        )
        assert restart.status_code == 201, restart.text
        wait_json(admin, "/v1/vms/legacy-1", lambda v: v["status"]["phase"] == "Pending")
        for field, kind, file in (
            ("kernel", "Kernel", "vmlinuz-6.1.0-amd64"),
            ("initrd", "Initrd", "initrd.img-6.1.0-amd64"),
        ):
            image = {
                "metadata": {"name": boot[field]},
                "spec": {"pool": "images", "file": file, "kind": kind},
            }
            assert admin.post("/v1/images", json=image).status_code == 201
        done = wait_json(admin, "/v1/operations/restart-legacy-1", lambda o: o["status"]["phase"] in FINISHED)
        assert done["status"]["phase"] == "Completed", done["status"]
        settled(admin, "legacy-1")


BMC_PASSWORD = "old-release-BMC-pa55word"


def a_secret_in_clear(data: Path) -> None:
    """A BMC Secret as every release before data migration 3 stored it: the password in clear."""
    body = {
        "apiVersion": "virtplane.io/v1",
        "kind": "Secret",
        "metadata": {"name": "bmc-old", "uid": "old-secret-uid", "labels": {}, "annotations": {}},
        "spec": {"username": "root", "password": BMC_PASSWORD},
    }
    with sqlite3.connect(data / "virtplane.db") as connection:
        connection.execute(
            "INSERT INTO objects (kind, name, uid, resource_version, generation, body) VALUES (?, ?, ?, 1, 1, ?)",
            ("Secret", "bmc-old", "old-secret-uid", json.dumps(body)),
        )
    connection.close()
    assert BMC_PASSWORD.encode() in (data / "virtplane.db").read_bytes(), "the starting point: in clear"


@pytest.mark.parametrize("release", RELEASES)
def test_an_old_secret_is_sealed_by_the_upgrade(release: str, tmp_path: Path) -> None:
    """Data migration 3 runs on each old release's store, with the key serve makes at start."""
    data = tmp_path / "data"
    with said_by_virtplane() as said, upgraded(release, tmp_path, before=a_secret_in_clear) as (server, _):
        store = server.store
        assert store.opened(store.get(Secret, "bmc-old")).spec.password == BMC_PASSWORD, "the BMC's view"
        with server.client("admin") as admin:
            assert BMC_PASSWORD not in admin.get("/v1/secrets/bmc-old").text, "write-only"
    assert any("bmc-old" in line and "spec.password sealed" in line for line in said), said
    files = b"".join(p.read_bytes() for p in data.glob("virtplane.db*"))
    assert BMC_PASSWORD.encode() not in files, "nor in the database's free space or WAL"
    assert stat.S_IMODE(os.stat(data / "secrets.key").st_mode) == 0o600


@pytest.mark.parametrize("release", RELEASES)
def test_old_volumes_are_full_copies_and_an_old_vm_becomes_a_template_of_linked_clones(
    release: str, tmp_path: Path
) -> None:
    """``spec.source.linked`` (issue 34) is new: an old Volume's source reads as a full copy, and a
    VM the old release made becomes a template whose disk backs a linked clone."""
    with upgraded(release, tmp_path) as (server, _), server.client("operator") as operator:
        sources = [
            v["spec"]["source"] for v in operator.get("/v1/volumes").json()["items"] if v["spec"]["source"]
        ]
        assert sources and all(source["linked"] is False for source in sources), sources
        settled(operator, "app-1", "Stopped")
        made_template = operator.patch(
            "/v1/vms/app-1", json={"spec": {"template": True, "run_policy": "AlwaysOff"}}
        )
        assert made_template.status_code == 200, made_template.text
        body = {"names": ["app-2"], "template": "app-1", "linked": True, "run_policy": "AlwaysOn"}
        made = operator.post("/v1/vms/actions/create", json=body)
        assert made.status_code == 201, made.text
        settled(operator, "app-2")
        refused = operator.delete("/v1/volumes/app-1-root")
        assert (refused.status_code, refused.json()["reason"]) == (409, "VolumeInUse"), refused.text
        assert "linked clones app-2-root" in refused.json()["message"]
