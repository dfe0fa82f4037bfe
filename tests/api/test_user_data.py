"""A VM's ``cloud_init.user_data`` often holds passwords and keys: viewers read it redacted,
in a get, a list page and a watch alike (and a snapshot's copy of it); operators and admins,
who may write it, read it as it is."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import LiveServer
from virtplane.api.shown import REDACTED_USER_DATA, public_bodies, public_doc
from virtplane.domain.resources import VirtualMachine, VirtualMachineSnapshot

USER_DATA = "#cloud-config\nchpasswd: {list: 'root:hunter2-in-user-data'}\n"


def vm(name: str, user_data: str) -> dict[str, Any]:
    return {
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"run_policy": "Manual", "cloud_init": {"user_data": user_data}},
    }


def test_viewers_read_user_data_redacted_operators_as_it_is(live_server: LiveServer) -> None:
    with live_server.client("operator") as operator:
        assert operator.post("/v1/vms", json=vm("secretive", USER_DATA)).status_code == 201
        assert operator.post("/v1/vms", json=vm("plain", "")).status_code == 201
    answers: dict[str, list[httpx.Response]] = {}
    for role in ("viewer", "operator", "admin"):
        with live_server.client(role) as client:
            answers[role] = [
                client.get("/v1/vms/secretive"),
                client.get("/v1/vms"),
                client.get("/v1/vms", params={"watch": "true", "resource_version": 0, "timeout_s": 0.5}),
            ]
    for answer in answers["viewer"]:
        assert answer.status_code == 200, answer.text
        assert "hunter2" not in answer.text, f"{answer.request.url} shows a viewer the user data"
        assert REDACTED_USER_DATA in answer.text
    assert answers["viewer"][0].json()["spec"]["cloud_init"]["user_data"] == REDACTED_USER_DATA
    plain = next(i for i in answers["viewer"][1].json()["items"] if i["metadata"]["name"] == "plain")
    assert plain["spec"]["cloud_init"]["user_data"] == "", "nothing to hide: shown as it is"
    for role in ("operator", "admin"):
        assert answers[role][0].json()["spec"]["cloud_init"]["user_data"] == USER_DATA
        for answer in answers[role][1:]:
            assert "hunter2" in answer.text and REDACTED_USER_DATA not in answer.text


def test_a_snapshots_copy_of_the_spec_is_redacted_too() -> None:
    spec = {"run_policy": "Manual", "cloud_init": {"user_data": USER_DATA}}
    snapshot = VirtualMachineSnapshot.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {"vm": "secretive"},
            "status": {"captured": {"spec": spec, "labels": {}}},
        }
    )
    shown = public_doc(snapshot, redacted=True)
    assert shown["status"]["captured"]["spec"]["cloud_init"]["user_data"] == REDACTED_USER_DATA
    [body] = public_bodies(VirtualMachineSnapshot, [snapshot.model_dump_json()], redacted=True)
    assert "hunter2" not in body
    machine = VirtualMachine.model_validate({"metadata": {"name": "v"}, "spec": spec})
    assert public_doc(machine)["spec"]["cloud_init"]["user_data"] == USER_DATA, "not redacted: as it is"
