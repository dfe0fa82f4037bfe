"""Input that used to be taken, or to fail with a 500, gets a 422 with a reason from the live
server: names with a trailing newline, selectors of thousands of requirements, a lone
surrogate in a label, free-form JSON nested hundreds deep (issue 31's probes)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import LiveServer


def refused(response: Any, reason: str = "Invalid") -> None:
    assert response.status_code == 422, response.text
    assert response.json()["reason"] == reason, response.text


def vm(name: str, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **metadata}, "spec": {"run_policy": "AlwaysOff"}}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/vms", vm("x\n")),
        ("/v1/vms", vm("x", labels={"app\n": "web"})),
        ("/v1/volumes", {"metadata": {"name": "v\n"}, "spec": {"pool": "p", "size_gib": 1}}),
        ("/v1/tokens", {"name": "t\n", "role": "viewer"}),
    ],
    ids=["vm", "label-key", "volume", "token"],
)
def test_a_name_with_a_trailing_newline_is_refused(live_server: LiveServer, path: str, body: Any) -> None:
    with live_server.client("admin") as admin:
        refused(admin.post(path, json=body))


def test_a_selector_of_thousands_of_requirements_is_422_not_500(live_server: LiveServer) -> None:
    many = ",".join(["k"] * 2048)  # 4,095 characters: under the length limit
    with live_server.client("viewer") as viewer:
        refused(viewer.get("/v1/vms", params={"labelSelector": many}), "InvalidSelector")
        values = ",".join(f"v{i}" for i in range(300))
        refused(viewer.get("/v1/vms", params={"labelSelector": f"k in ({values})"}), "InvalidSelector")
        fields = ",".join("metadata.name!=x" for _ in range(240))
        refused(viewer.get("/v1/vms", params={"fieldSelector": fields}), "InvalidSelector")
    with live_server.client("operator") as operator:
        answer = operator.post("/v1/vms/actions/stop", json={"labelSelector": many})
        refused(answer, "InvalidSelector")


def test_a_lone_surrogate_in_a_label_is_422_not_500(live_server: LiveServer) -> None:
    headers = {"content-type": "application/json"}
    with live_server.client("operator") as operator:
        for labels in ('{"app": "\\ud800"}', '{"\\udfff": "web"}'):
            body = '{"metadata": {"name": "s-1", "labels": ' + labels + '}, "spec": {}}'
            refused(operator.post("/v1/vms", content=body, headers=headers))
        assert operator.get("/v1/vms/s-1").status_code == 404


def test_free_form_json_nested_deep_is_422_not_500(live_server: LiveServer) -> None:
    nested = '{"a": ' * 900 + "1" + "}" * 900
    spec = '"spec": {"run_policy": "AlwaysOff", "cloud_init": {"network_config": ' + nested + "}}"
    body = '{"metadata": {"name": "deep-1"}, ' + spec + "}"
    with live_server.client("operator") as operator:
        refused(operator.post("/v1/vms", content=body, headers={"content-type": "application/json"}))
