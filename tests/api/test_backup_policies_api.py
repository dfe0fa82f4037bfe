"""Backup policies through the API (issue 36): an admin's kind, a viewer reads it; a bad
schedule, selector or target is a 422 with the reason; a target a policy writes to is not
deleted under it."""

from __future__ import annotations

from typing import Any

from tests.conftest import LiveServer, wait_json
from virtplane.domain.resources import VERIFY_REQUESTED

TARGET = {
    "kind": "BackupTarget",
    "metadata": {"name": "t"},
    "spec": {"path": "/srv/backups", "capacity_gib": 10},
}


def policy(name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "kind": "BackupPolicy",
        "metadata": {"name": name},
        "spec": {"target": "t", "schedule": "0 2 * * *", "selector": "backup=nightly", **spec},
    }


def test_an_admin_writes_policies_an_operator_may_not_a_viewer_reads(live_server: LiveServer) -> None:
    with (
        live_server.client("admin") as admin,
        live_server.client("operator") as operator,
        live_server.client("viewer") as viewer,
    ):
        assert admin.post("/v1/backuptargets", json=TARGET).status_code == 201
        body = policy(retention={"keep_last": 3, "keep_daily": 7}, max_per_host=2)
        assert admin.post("/v1/backuppolicies", json=body).status_code == 201
        assert operator.post("/v1/backuppolicies", json=policy("other")).status_code == 403
        assert operator.delete("/v1/backuppolicies/nightly").status_code == 403
        [seen] = viewer.get("/v1/backuppolicies").json()["items"]
        assert seen["spec"]["retention"] == {
            "keep_last": 3,
            "keep_daily": 7,
            "keep_weekly": 0,
            "keep_monthly": 0,
        }
        assert (seen["spec"]["max_per_host"], seen["spec"]["max_per_target"]) == (2, 2)
        response = admin.delete("/v1/backuptargets/t")
        assert (response.status_code, response.json()["reason"]) == (409, "TargetInUse"), response.text
        assert "backup policy nightly writes to" in response.json()["message"]
        assert admin.delete("/v1/backuppolicies/nightly").status_code in (200, 204)
        assert admin.delete("/v1/backuptargets/t").status_code in (200, 204)


def test_a_bad_policy_is_refused_with_the_reason(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/backuptargets", json=TARGET).status_code == 201
        for body, words in (
            (policy(schedule="every night"), "is not a cron schedule"),
            (policy(schedule="0 2 * *"), "is not a cron schedule"),
            (policy(verify_schedule="61 * * * *"), "is not a cron schedule"),
            (policy(selector="app in (web"), "not a label selector"),
            (policy(retention={"keep_last": -1}), "greater than or equal to 0"),
            (policy(max_per_target=0), "greater than or equal to 1"),
            (policy(retention={"keep_yearly": 1}), "keep_yearly"),
        ):
            response = admin.post("/v1/backuppolicies", json=body)
            assert response.status_code == 422, response.text
            assert words in response.text, response.text
        response = admin.post("/v1/backuppolicies", json=policy(target="nope"))
        assert (response.status_code, response.json()["reason"]) == (422, "TargetNotFound"), response.text
        assert "backup target nope does not exist" in response.json()["message"]


def test_verify_is_asked_of_a_succeeded_backup_by_an_operator(live_server: LiveServer) -> None:
    with (
        live_server.client("admin") as admin,
        live_server.client("operator") as operator,
        live_server.client("viewer") as viewer,
    ):
        assert admin.post("/v1/backuptargets", json=TARGET).status_code == 201
        vm = {"metadata": {"name": "web"}, "spec": {"run_policy": "Manual"}}
        assert admin.post("/v1/vms", json=vm).status_code == 201
        response = operator.post("/v1/backups/nope/verify")
        assert (response.status_code, response.json()["reason"]) == (404, "NotFound"), response.text
        backup = {
            "kind": "VirtualMachineBackup",
            "metadata": {"name": "b1"},
            "spec": {"vm": "web", "target": "t"},
        }
        assert operator.post("/v1/backups", json=backup).status_code == 201
        wait_json(operator, "/v1/backups/b1", lambda b: b["status"]["phase"] == "Failed")  # web has no disks
        assert viewer.post("/v1/backups/b1/verify").status_code == 403
        response = operator.post("/v1/backups/b1/verify")
        assert (response.status_code, response.json()["reason"]) == (409, "BackupNotSucceeded"), response.text
        assert "b1 is Failed: only a succeeded backup can be verified" in response.json()["message"]
        assert VERIFY_REQUESTED not in operator.get("/v1/backups/b1").json()["metadata"]["annotations"]
