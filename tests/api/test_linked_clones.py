"""Linked clones (issue 34 item 4), on the simulator through the real app: with ``linked`` each
disk of a template is an overlay on the template's volume, not a copy. Where one cannot be made
the request is a 4xx saying why, with nothing created; the template's volume cannot be deleted,
nor the template made an ordinary VM again, while a linked clone uses it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.test_images import wait
from tests.api.test_vm_create import _manifest, _template, world  # noqa: F401 (a fixture)
from tests.conftest import LiveServer, wait_json


def create(operator: httpx.Client, **body: Any) -> httpx.Response:
    return operator.post("/v1/vms/actions/create", json=body)


def nothing_made(operator: httpx.Client, *names: str) -> None:
    for name in names:
        assert operator.get(f"/v1/vms/{name}").status_code == 404
        assert operator.get(f"/v1/volumes/{name}-root").status_code == 404


def test_linked_clones_run_and_their_backing_volume_stays_while_they_exist(world: LiveServer) -> None:  # noqa: F811
    with world.client("operator") as operator:
        _template(operator)
        made = create(operator, names=["l-1", "l-2"], template="tmpl", linked=True, run_policy="AlwaysOn")
        assert made.status_code == 201, made.text
        for name in ("l-1", "l-2"):
            volume = operator.get(f"/v1/volumes/{name}-root").json()
            assert volume["spec"]["source"] == {
                "volume": "tmpl-root",
                "linked": True,
                "image": None,
                "snapshot": None,
                "backup": None,
            }
            wait_json(operator, f"/v1/vms/{name}", lambda v: v["status"]["phase"] == "Running")

        deleted = operator.delete("/v1/volumes/tmpl-root")
        assert (deleted.status_code, deleted.json()["reason"]) == (409, "VolumeInUse"), deleted.text
        assert "linked clones l-1-root, l-2-root" in deleted.json()["message"]
        untemplated = operator.patch("/v1/vms/tmpl", json={"spec": {"template": False}})
        assert (untemplated.status_code, untemplated.json()["reason"]) == (409, "TemplateHasLinkedClones")

        for name in ("l-1", "l-2"):
            assert operator.delete(f"/v1/vms/{name}").status_code == 200
            wait(lambda name=name: operator.get(f"/v1/vms/{name}").status_code == 404)
            assert operator.delete(f"/v1/volumes/{name}-root").status_code == 200
            wait(lambda name=name: operator.get(f"/v1/volumes/{name}-root").status_code == 404)
        assert operator.delete("/v1/volumes/tmpl-root").status_code == 409  # a disk of the template still
        assert operator.patch("/v1/vms/tmpl", json={"spec": {"template": False}}).status_code == 200


def test_where_a_linked_clone_cannot_be_made_the_request_says_why(world: LiveServer) -> None:  # noqa: F811
    with world.client("admin") as admin:
        local = _manifest("StoragePool", "h1-local", kind="local", host="h1", capacity_gib=100)
        assert admin.post("/v1/storagepools", json=local).status_code == 201
    with world.client("operator") as operator:
        _template(operator)
        assert operator.patch("/v1/vms/tmpl", json={"spec": {"template": False}}).status_code == 200
        answer = create(operator, names=["n-1"], template="tmpl", linked=True)
        assert (answer.status_code, answer.json()["reason"]) == (422, "LinkedNeedsTemplate"), answer.text
        assert "vm template tmpl" in answer.json()["message"]
        nothing_made(operator, "n-1")
        # a full copy is still made without linked
        assert create(operator, names=["n-2"], template="tmpl").status_code == 201

        across = _manifest(
            "Volume", "x", pool="h1-local", size_gib=4, source={"volume": "tmpl-root", "linked": True}
        )
        answer = operator.post("/v1/volumes", json=across)
        assert (answer.status_code, answer.json()["reason"]) == (422, "LinkedAcrossPools"), answer.text
        from_image = _manifest(
            "Volume", "y", pool="vols", size_gib=4, source={"image": "disk", "linked": True}
        )
        answer = operator.post("/v1/volumes", json=from_image)
        assert (answer.status_code, answer.json()["reason"]) == (422, "LinkedNeedsVolume"), answer.text
        local_disk = _manifest("Volume", "on-host", pool="h1-local", size_gib=4)
        assert operator.post("/v1/volumes", json=local_disk).status_code == 201
        answer = operator.post(
            "/v1/volumes",
            json=_manifest(
                "Volume", "z", pool="h1-local", size_gib=4, source={"volume": "on-host", "linked": True}
            ),
        )
        assert (answer.status_code, answer.json()["reason"]) == (422, "LinkedOnLocalPool"), answer.text


def test_a_linked_clone_is_not_itself_copied(world: LiveServer) -> None:  # noqa: F811
    with world.client("operator") as operator:
        _template(operator)
        assert create(operator, names=["l-1"], template="tmpl", linked=True).status_code == 201
        wait_json(operator, "/v1/volumes/l-1-root", lambda v: v["status"]["phase"] == "Ready")
        wait_json(operator, "/v1/vms/l-1", lambda v: v["status"]["phase"] == "Stopped")
        assert (
            operator.patch(
                "/v1/vms/l-1", json={"spec": {"template": True, "run_policy": "AlwaysOff"}}
            ).status_code
            == 200
        )
        for linked in (True, False):
            answer = create(operator, names=["l-2"], template="l-1", linked=linked)
            assert (answer.status_code, answer.json()["reason"]) == (409, "LinkedSource"), answer.text
        nothing_made(operator, "l-2")


def test_the_backing_volume_is_a_disk_of_no_vm_but_a_template(world: LiveServer) -> None:  # noqa: F811
    with world.client("operator") as operator:
        _template(operator)
        assert create(operator, names=["l-1"], template="tmpl", linked=True).status_code == 201
        assert operator.delete("/v1/vms/tmpl").status_code == 200
        wait(lambda: operator.get("/v1/vms/tmpl").status_code == 404)
        vm = _manifest("VirtualMachine", "writer", run_policy="Manual", disks=[{"volume": "tmpl-root"}])
        answer = operator.post("/v1/vms", json=vm)
        assert (answer.status_code, answer.json()["reason"]) == (409, "VolumeBacksLinkedClones"), answer.text
        vm["spec"] |= {"template": True, "run_policy": "AlwaysOff"}
        assert operator.post("/v1/vms", json=vm).status_code == 201


def test_a_linked_clone_of_a_snapshot_keeps_the_snapshot(world: LiveServer) -> None:  # noqa: F811
    with world.client("operator") as operator:
        _template(operator)
        snapshot = {"metadata": {"name": "tmpl-snap"}, "spec": {"vm": "tmpl"}}
        assert operator.post("/v1/snapshots", json=snapshot).status_code == 201
        wait_json(operator, "/v1/snapshots/tmpl-snap", lambda s: s["status"]["phase"] == "Ready")
        made = create(operator, names=["s-1"], snapshot="tmpl-snap", linked=True, run_policy="AlwaysOn")
        assert made.status_code == 201, made.text
        source = operator.get("/v1/volumes/s-1-root").json()["spec"]["source"]
        assert (source["snapshot"], source["volume"], source["linked"]) == ("tmpl-snap", "tmpl-root", True)
        wait_json(operator, "/v1/vms/s-1", lambda v: v["status"]["phase"] == "Running")

        deleted = operator.delete("/v1/snapshots/tmpl-snap")
        assert (deleted.status_code, deleted.json()["reason"]) == (409, "SnapshotInUse"), deleted.text
        assert "linked clones s-1-root" in deleted.json()["message"]
        assert operator.delete("/v1/vms/s-1").status_code == 200
        wait(lambda: operator.get("/v1/vms/s-1").status_code == 404)
        assert operator.delete("/v1/volumes/s-1-root").status_code == 200
        wait(lambda: operator.get("/v1/volumes/s-1-root").status_code == 404)
        assert operator.delete("/v1/snapshots/tmpl-snap").status_code == 200
