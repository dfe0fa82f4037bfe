"""The audit log on a live server over SQLite: a delete and a console session, by whom, from where."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.api.test_console import PROMPT, attach, until
from tests.conftest import LiveServer, seed_console_world, wait_json
from virtplane.api.audit import describe
from virtplane.store.audit import AuditEntry
from virtplane.store.store import Store


def _records(admin: httpx.Client, at_least: int = 0, **params: Any) -> list[dict[str, Any]]:
    """The records ``params`` select, once there are ``at_least`` of them: a write is answered
    before its record's batch commits (``AuditRecorder.record``)."""
    path = str(httpx.URL("/v1/audit", params=params))
    body = wait_json(admin, path, lambda body: len(body.get("items", ())) >= at_least)
    items: list[dict[str, Any]] = body["items"]
    return items


def test_a_delete_is_recorded_by_whom(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin, live_server.client("operator") as operator:
        admin.post("/v1/tokens", json={"name": "ci", "role": "operator", "owner": "svc-ci"})
        vm = {"metadata": {"name": "web-9", "labels": {"app": "web"}}, "spec": {"cpu": 1, "memory_mib": 256}}
        assert operator.post("/v1/vms", json=vm).status_code == 201
        assert operator.delete("/v1/vms/web-9").status_code in (200, 202)
        records = _records(admin, 2, kind="vms", name="web-9")
        assert [r["verb"] for r in records] == ["create", "delete"], records
        created, deleted = records
        assert created["fields"] == ["metadata.labels", "spec.cpu", "spec.memory_mib"]
        for record in records:
            assert record["token"] == "test-operator" and record["owner"] == "test-operator"
            assert record["client"] == "127.0.0.1" and record["kind"] == "VirtualMachine"
        assert deleted["status"] in (200, 202) and deleted["reason"] == ""
        # a replace and a patch record what changed, not everything they sent
        vm["metadata"]["name"] = "web-8"
        current = operator.post("/v1/vms", json=vm).json()
        current["spec"]["cpu"] = 2
        del current["metadata"]["resource_version"]  # no optimistic lock: the controller writes it too
        assert operator.put("/v1/vms/web-8", json=current).status_code == 200
        patch = {"metadata": {"labels": {"app": "db"}}, "spec": {"cpu": 2}}
        patched = operator.patch(
            "/v1/vms/web-8", json=patch, headers={"Content-Type": "application/merge-patch+json"}
        )
        assert patched.status_code == 200, patched.text
        changes = [(r["verb"], r["fields"]) for r in _records(admin, 3, name="web-8")][1:]
        assert changes == [("replace", ["spec.cpu"]), ("patch", ["metadata.labels"])]
        # a refused write is recorded with its outcome; a token's creation names no secret
        assert operator.delete("/v1/hosts/nowhere").status_code == 403
        refused = _records(admin, 1, kind="Host", name="nowhere")
        assert [(r["verb"], r["status"], r["reason"]) for r in refused] == [("delete", 403, "Forbidden")]
        token = _records(admin, 1, kind="Token", name="ci")[0]
        assert token["verb"] == "create" and token["fields"] == ["owner", "role"], token
        assert token["token"] == "test-admin"


def test_a_console_session_is_recorded_open_and_closed(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        seed_console_world(admin)
        with attach(live_server) as ws:
            until(ws, PROMPT)
        # the close is recorded once the server sees the client go: wait for it
        wait_json(
            admin,
            "/v1/audit?name=web-1",
            lambda body: any(r["verb"] == "console-close" for r in body["items"]),
        )
        records = [r for r in _records(admin, name="web-1") if r["subresource"] == "console"]
        assert [(r["verb"], r["token"], r["client"]) for r in records] == [
            ("console-open", "test-operator", "127.0.0.1"),
            ("console-close", "test-operator", "127.0.0.1"),
        ]
        assert records[1]["reason"] == "ConsoleDetached"


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_reads_the_audit_log(live_server: LiveServer, role: str) -> None:
    with live_server.client(role) as client:
        refused = client.get("/v1/audit")
        assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"


def test_pages_and_since(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        start = datetime.now(UTC)
        for i in range(5):
            admin.post("/v1/tokens", json={"name": f"p{i}", "role": "viewer"})
        _records(admin, 5, kind="Token")
        first = admin.get("/v1/audit", params={"kind": "Token", "limit": 3}).json()
        assert [r["name"] for r in first["items"]] == ["p0", "p1", "p2"]
        rest = admin.get(
            "/v1/audit", params={"kind": "Token", "continue": first["metadata"]["continue"]}
        ).json()
        assert [r["name"] for r in rest["items"]] == ["p3", "p4"] and rest["metadata"]["continue"] is None
        later = (start + timedelta(days=1)).isoformat()
        assert _records(admin, since=later) == []
        assert admin.get("/v1/audit", params={"since": "2026-01-01T00:00:00"}).status_code == 422


def test_records_are_exported_as_json_lines(
    live_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="virtplane.audit")
    with live_server.client("admin") as admin:
        admin.post("/v1/tokens", json={"name": "shipped", "role": "viewer"})
        _records(admin, 1, kind="Token", name="shipped")
    lines = [json.loads(r.getMessage())["audit"] for r in caplog.records if r.name == "virtplane.audit"]
    assert [(line["verb"], line["kind"], line["name"]) for line in lines] == [("create", "Token", "shipped")]


def test_pruned_by_age_and_count(store: Store) -> None:
    old = datetime.now(UTC) - timedelta(days=10)
    for i in range(5):
        store.record_audit(AuditEntry("delete", "VirtualMachine", f"old-{i}", 200, "127.0.0.1", time=old))
    for i in range(5):
        store.record_audit(AuditEntry("delete", "VirtualMachine", f"new-{i}", 200, "127.0.0.1"))
    assert store.prune_audit(max_age=timedelta(days=7), max_records=3) == 7
    assert [e.name for e in store.audit_records()] == ["new-2", "new-3", "new-4"]


@pytest.mark.parametrize(
    ("method", "path", "body", "described"),
    [
        ("POST", "/v1/vms/web-1/start", b"", ("start", "VirtualMachine", "web-1", "start", ())),
        (
            "POST",
            "/v1/hosts/h1/maintenance",
            b'{"strategy":"Migration"}',
            ("maintenance", "Host", "h1", "maintenance", ("strategy",)),
        ),
        ("DELETE", "/v1/hosts/h1/maintenance", b"", ("delete", "Host", "h1", "maintenance", ())),
        ("POST", "/v1/hosts/h1/faults", b'{"kind":"crash"}', ("faults", "Host", "h1", "faults", ("kind",))),
        (
            "POST",
            "/v1/vms/actions/stop",
            b'{"selector":"app=web"}',
            ("stop", "VirtualMachine", "", "actions", ("selector",)),
        ),
        ("DELETE", "/v1/tokens/ci", b"", ("revoke", "Token", "ci", "", ())),
        (
            "PUT",
            "/v1/secrets/bmc",
            b'{"metadata":{"name":"bmc"},"spec":{"password":"hunter2"}}',
            ("replace", "Secret", "bmc", "", ("spec.password",)),
        ),
        ("PATCH", "/v1/vms/a", b"not json", ("patch", "VirtualMachine", "a", "", ())),
    ],
)
def test_what_a_write_is(method: str, path: str, body: bytes, described: tuple[Any, ...]) -> None:
    assert describe(method, path, body) == described
