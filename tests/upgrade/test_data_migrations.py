"""The data migrations (``store/migrations/data``) as tables: each rule over a JSON body, and
the runner over a store (each migration once, a revision and an event per changed object)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

from virtplane.domain.resources import KIND_BY_NAME
from virtplane.store import schema
from virtplane.store.migrations.data import LATEST, data_version, upgrade_bodies
from virtplane.store.migrations.data.base import Known
from virtplane.store.migrations.data.d0001_volume_file import upgrade as volume_file
from virtplane.store.migrations.data.d0002_host_paths import (
    ANNOTATION_PREFIX,
    CONDITION,
    legacy_image_name,
)
from virtplane.store.migrations.data.d0002_host_paths import upgrade as host_paths
from virtplane.store.store import Store, sqlite_url

LIBRARY = "/srv/images"
KNOWN: Known = {
    "StoragePool": [
        {"metadata": {"name": "lib"}, "spec": {"kind": "shared", "content": "images", "path": LIBRARY}},
        {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "path": "/srv/volumes"}},
        {"metadata": {"name": "default-lib"}, "spec": {"kind": "shared", "content": "images"}},
    ],
    "Image": [
        {"metadata": {"name": "debian-12"}, "spec": {"pool": "lib", "file": "debian.qcow2", "kind": "Disk"}},
        {"metadata": {"name": "vmlinuz"}, "spec": {"pool": "lib", "file": "vmlinuz", "kind": "Kernel"}},
        {"metadata": {"name": "deflt"}, "spec": {"pool": "default-lib", "file": "d.qcow2", "kind": "Disk"}},
    ],
}


def volume(status: dict[str, Any], image: str | None = None) -> dict[str, Any]:
    source = {"image": image, "snapshot": None} if image else None
    return {
        "metadata": {"name": "v", "annotations": {}},
        "spec": {"pool": "shared", "size_gib": 1, "source": source},
        "status": status,
    }


@pytest.mark.parametrize(
    ("status", "file"),
    [
        ({"phase": "Ready", "path": "sim://shared/web-1-root"}, "web-1-root"),  # the simulator's
        ({"phase": "Ready", "path": "/var/lib/virtplane/pools/shared/db-1-root"}, "db-1-root"),  # libvirt's
        ({"phase": "Ready", "path": "sim://shared/vp-1", "file": "vp-1"}, "vp-1"),  # a current body
        ({"phase": "Pending", "path": "", "file": ""}, ""),  # current, not created yet: the uid's name
        ({"phase": "Pending", "path": ""}, None),  # old, never created: no file to find
    ],
)
def test_volume_file_comes_from_the_recorded_path(status: dict[str, Any], file: str | None) -> None:
    body = volume(dict(status))
    changes = volume_file("Volume", body, KNOWN)
    assert body["status"].get("file") == file
    assert bool(changes) == ("file" not in status and file is not None)
    assert volume_file("Volume", body, KNOWN) == [], "a second run changes nothing"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("debian-12", "debian-12"),  # already an Image name
        (f"{LIBRARY}/debian.qcow2", "debian-12"),  # the file of an Image in a library
        (f"{LIBRARY}//./debian.qcow2", "debian-12"),  # the same file, spelt otherwise
        ("/var/lib/virtplane/pools/default-lib/d.qcow2", "deflt"),  # a library at the default root
        (f"{LIBRARY}/vmlinuz", None),  # a library file, but a kernel's Image: not a disk
        (f"{LIBRARY}/other.qcow2", None),  # in the library, no Image names it
        (f"{LIBRARY}/sub/debian.qcow2", None),  # not directly inside the library
        (f"{LIBRARY}-private/debian.qcow2", None),  # a sibling directory is not the library
        ("/srv/volumes/debian.qcow2", None),  # a volume pool is no library
        ("http://example.com/debian.qcow2", None),  # a URL, as the oldest API allowed
    ],
)
def test_a_volume_source_path_becomes_an_image_reference(path: str, expected: str | None) -> None:
    body = volume({"phase": "Ready", "path": "sim://shared/v", "file": "v"}, image=path)
    changes = host_paths("Volume", body, KNOWN)
    image = body["spec"]["source"]["image"]
    annotations = body["metadata"]["annotations"]
    if expected is not None:
        assert image == expected
        assert annotations == {}
        assert bool(changes) == (path != expected)
    else:
        assert image == legacy_image_name(path) and image not in {"debian-12", "deflt", "vmlinuz"}
        assert annotations == {ANNOTATION_PREFIX + "spec.source.image": path}, "the path is kept"
        (change,) = changes
        assert "spec.source.image" in change and f"create Image {image}" in change
        assert body["status"]["message"] == change
    KIND_BY_NAME["Volume"].model_validate(body)  # readable by the current model
    again = copy.deepcopy(body)
    assert host_paths("Volume", again, KNOWN) == [] and again == body, "a second run changes nothing"


def test_legacy_image_names_are_labels_and_tell_paths_apart() -> None:
    names = {legacy_image_name(p) for p in ("/a/vmlinuz", "/b/vmlinuz", "/" + "X" * 300, "/", "/a/...")}
    assert len(names) == 5
    for name in names:
        KIND_BY_NAME["Image"].model_validate(
            {"metadata": {"name": name}, "spec": {"pool": "p", "file": "f", "kind": "Disk"}}
        )


def vm_spec(kernel: str, initrd: str | None) -> dict[str, Any]:
    return {"disks": [], "boot": {"kernel": kernel, "initrd": initrd, "cmdline": ""}}


def test_vm_boot_paths_become_image_references_with_a_condition_naming_each_field() -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "vm", "generation": 3},
        "spec": vm_spec(f"{LIBRARY}/vmlinuz", "/boot/initrd.img"),
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    changes = host_paths("VirtualMachine", body, KNOWN)
    assert body["spec"]["boot"]["kernel"] == "vmlinuz"
    assert body["spec"]["boot"]["initrd"] == legacy_image_name("/boot/initrd.img")
    assert body["metadata"]["annotations"] == {ANNOTATION_PREFIX + "spec.boot.initrd": "/boot/initrd.img"}
    assert len(changes) == 2
    ready, migrated = body["status"]["conditions"]
    assert ready["type"] == "Ready" and migrated["type"] == CONDITION
    assert "spec.boot.initrd" in migrated["message"] and "spec.boot.kernel" not in migrated["message"]
    assert "kind Initrd" in migrated["message"]
    KIND_BY_NAME["VirtualMachine"].model_validate(body)


def test_a_snapshot_keeps_the_captured_spec_readable() -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "s"},
        "spec": {"vm": "vm"},
        "status": {"phase": "Ready", "captured": {"spec": vm_spec("/boot/vmlinuz", None)}},
    }
    (change,) = host_paths("VirtualMachineSnapshot", body, KNOWN)
    assert "status.captured.spec.boot.kernel" in change
    assert body["status"]["captured"]["spec"]["boot"]["kernel"] == legacy_image_name("/boot/vmlinuz")
    assert body["status"]["conditions"][0]["type"] == CONDITION
    KIND_BY_NAME["VirtualMachineSnapshot"].model_validate(body)


def test_the_runner_applies_each_migration_once_with_a_revision_and_an_event(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "s.db"))
    store.migrate()
    with store.engine.begin() as connection:
        assert data_version(connection) == LATEST, "a new database needs none of them"
        old = volume({"phase": "Ready", "path": "sim://shared/v", "size_gib": 1})
        old["metadata"].update(uid="u-1", resource_version=0, generation=1, labels={})
        connection.execute(
            schema.objects.insert().values(
                kind="Volume", name="v", uid="u-1", resource_version=0, generation=1, body=json.dumps(old)
            )
        )
        connection.execute(text("DELETE FROM feed_state WHERE name = 'data:version'"))
        lines = upgrade_bodies(connection)
        assert lines[0].startswith("Volume/v: status.file set to 'v'")
        assert lines[-1] == f"data migrations 1, 2, 3 applied: {len(lines) - 1} line(s) above"
        assert upgrade_bodies(connection) == [], "each runs once"
    stored = store.get(KIND_BY_NAME["Volume"], "v")
    assert stored.status.file == "v"  # type: ignore[attr-defined]
    assert stored.metadata.resource_version == store.revision() > 0, "a change the feed shows"
    assert stored.metadata.generation == 1, "the same intent, restated"
    with store.engine.connect() as connection:
        events = connection.execute(select(schema.events.c.reason, schema.events.c.name)).all()
    assert [tuple(e) for e in events] == [("Upgraded", "v")]
    store.close()


def test_a_body_no_release_wrote_is_left_and_named_and_the_rest_migrate(tmp_path: Path) -> None:
    store = Store(sqlite_url(tmp_path / "s.db"))
    store.migrate()
    odd_vm = {
        "metadata": {"name": "odd"},
        "spec": vm_spec("/boot/vmlinuz", None),
        "status": {"conditions": ["?"]},
    }
    good = volume({"phase": "Ready", "path": "sim://shared/v"})
    rows = [
        ("VirtualMachine", "odd", json.dumps(odd_vm)),
        ("Volume", "junk", "[]"),
        ("Volume", "v", json.dumps(good)),
    ]
    with store.engine.begin() as connection:
        for kind, name, body in rows:
            connection.execute(
                schema.objects.insert().values(
                    kind=kind, name=name, uid=name, resource_version=0, generation=1, body=body
                )
            )
        connection.execute(text("DELETE FROM feed_state WHERE name = 'data:version'"))
        lines = upgrade_bodies(connection)
    assert lines[0].startswith("VirtualMachine/odd: left as it was, not understood"), lines
    assert lines[1].startswith("Volume/v: status.file set to 'v'"), lines
    with store.engine.connect() as connection:
        bodies = dict(connection.execute(select(schema.objects.c.name, schema.objects.c.body)).all())
    assert bodies["junk"] == "[]" and json.loads(bodies["odd"]) == odd_vm, "left exactly as they were"
    store.close()
