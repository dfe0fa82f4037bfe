"""Secrets (issue 15): admin-only, write-only (no response ever carries the password, nor does a
log line or an event), and the hosts' spec.fencing.redfish that refers to them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, serving
from virtplane.domain.resources import Secret
from virtplane.store.database import sqlite_url
from virtplane.store.store import Store

PASSWORD = "s3cret-Pa55-never-shown"
SECRET = {
    "kind": "Secret",
    "metadata": {"name": "bmc-h1"},
    "spec": {"username": "root", "password": PASSWORD},
}


def _host(name: str, **redfish: Any) -> dict[str, Any]:
    fencing = {"address": "https://10.0.0.9", "system_id": "1", "credentials_secret": "bmc-h1", **redfish}
    return {
        "kind": "Host",
        "metadata": {"name": name},
        "spec": {"uri": f"sim://{name}", "fencing": {"redfish": fencing}},
    }


def test_the_password_never_comes_back(live_server: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answers = []
    with live_server.client("admin") as admin:
        answers.append(admin.post("/v1/secrets", json=SECRET))
        assert answers[-1].status_code == 201, answers[-1].text
        answers.append(admin.get("/v1/secrets/bmc-h1"))
        answers.append(admin.get("/v1/secrets"))
        answers.append(admin.patch("/v1/secrets/bmc-h1", json={"spec": {"username": "admin"}}))
        answers.append(admin.put("/v1/secrets/bmc-h1", json={**SECRET, "spec": {"username": "ops"}}))
        answers.append(admin.get("/v1/events", params={"kind": "Secret"}))
        answers.append(  # a watch streams the changes: the objects as the API shows them
            admin.get("/v1/secrets", params={"watch": "true", "resource_version": 0, "timeout_s": 0.5})
        )
        assert admin.post("/v1/secrets", json={**SECRET, "metadata": {"name": "gone"}}).status_code == 201
        answers.append(admin.delete("/v1/secrets/gone"))
    for answer in answers:
        assert answer.status_code < 300, answer.text
        assert PASSWORD not in answer.text, f"{answer.request.method} {answer.request.url} shows the password"
    assert answers[-2].text.count('"type":"ADDED"') == 1, answers[-2].text
    got = answers[1].json()
    assert "password" not in got["spec"] and got["status"] == {"password_set": True}
    assert answers[4].json()["spec"] == {"username": "ops"}
    stored = live_server.store.get(Secret, "bmc-h1")
    assert live_server.store.opened(stored).spec.password == PASSWORD, (
        "a write without it keeps the stored one"
    )
    assert stored.spec.password and stored.spec.password.startswith("vp-sealed:v1:"), "sealed at rest"
    assert PASSWORD not in repr(stored), "nor is it in a repr (tracebacks, logs)"
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_an_admin_reads_or_writes_secrets(live_server: LiveServer, role: str) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/secrets", json=SECRET).status_code == 201
    with live_server.client(role) as client:
        for response in (
            client.get("/v1/secrets"),
            client.get("/v1/secrets/bmc-h1"),
            client.post("/v1/secrets", json={**SECRET, "metadata": {"name": "other"}}),
            client.delete("/v1/secrets/bmc-h1"),
        ):
            assert response.status_code == 403, response.text
            assert response.json()["reason"] == "Forbidden"


@pytest.mark.parametrize(
    ("doc", "status", "reason"),
    [
        ({**SECRET, "spec": {"username": "root"}}, 422, "PasswordRequired"),
        ({**SECRET, "spec": {"username": "", "password": "x"}}, 422, None),
        ({**SECRET, "spec": {"username": "root", "password": "x", "token": "y"}}, 422, None),
    ],
)
def test_bad_secrets(live_server: LiveServer, doc: dict[str, Any], status: int, reason: str | None) -> None:
    with live_server.client("admin") as admin:
        response = admin.post("/v1/secrets", json=doc)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["reason"] and body["message"]
    if reason:
        assert body["reason"] == reason


@pytest.mark.parametrize(
    ("redfish", "reason", "says"),
    [
        ({"credentials_secret": "nope"}, "SecretNotFound", "secret nope does not exist"),
        ({"address": "ftp://bmc"}, None, "address"),
        ({"address": "https://user:pw@bmc"}, None, "address"),
        ({"address": "https://bmc/redfish/v1"}, None, "address"),
        ({"system_id": "../../Managers"}, None, "system_id"),
        ({"system_id": ""}, None, "system_id"),
        ({"verify_tls": "perhaps"}, None, "verify_tls"),
        ({"password": "inline"}, None, "password"),  # credentials only through a Secret
    ],
)
def test_bad_fencing(live_server: LiveServer, redfish: dict[str, Any], reason: str | None, says: str) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/secrets", json=SECRET).status_code == 201
        response = admin.post("/v1/hosts", json=_host("h1", **redfish))
    assert response.status_code == 422, response.text
    body = response.json()
    assert says in body["message"], body
    if reason:
        assert body["reason"] == reason


def test_a_secret_in_use_cannot_be_deleted(live_server: LiveServer) -> None:
    with live_server.client("admin") as admin:
        assert admin.post("/v1/secrets", json=SECRET).status_code == 201
        created = admin.post("/v1/hosts", json=_host("h1", verify_tls=False))
        assert created.status_code == 201, created.text
        assert created.json()["spec"]["fencing"]["redfish"]["verify_tls"] is False
        refused = admin.delete("/v1/secrets/bmc-h1")
        assert refused.status_code == 409 and refused.json()["reason"] == "SecretInUse", refused.text
        assert admin.patch("/v1/hosts/h1", json={"spec": {"fencing": None}}).status_code == 200
        assert admin.delete("/v1/secrets/bmc-h1").status_code == 200


def test_a_server_whose_store_has_no_secrets_key_refuses_a_password_with_a_reason(
    tmp_path: Path,
) -> None:
    """A store opened without its key (an embedding, a test) cannot seal a password: a 409 that
    says so, not a 500 (the fuzzer found it)."""
    store = Store(sqlite_url(tmp_path / "keyless.db"))
    store.migrate()
    with serving(store, name="keyless") as server, server.client("admin") as admin:
        answer = admin.post("/v1/secrets", json=SECRET)
    store.close()
    assert answer.status_code == 409, answer.text
    assert answer.json()["reason"] == "SecretsKeyMissing"
