"""LDAP logins against a real slapd, on a live server: roles from groups, the refusals, and a
session token that is revoked or expires like any other."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import LiveServer, eventually_sync
from tests.identity.conftest import ServerWith
from tests.identity.slapd import BASE, ROOT_DN, ROOT_PASSWORD, start_slapd

VM = {"kind": "VirtualMachine", "metadata": {"name": "web-1"}, "spec": {"run_policy": "Manual"}}
HOST = {"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}


def login(server: LiveServer, username: str, password: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/login", json={"username": username, "password": password}, timeout=10)


def session(server: LiveServer, username: str, password: str) -> tuple[dict[str, Any], httpx.Client]:
    answer = login(server, username, password)
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    headers = {"Authorization": f"Bearer {body['token']}"}
    return body, httpx.Client(base_url=server.url, headers=headers, timeout=10)


def test_an_operator_group_user_logs_in_starts_a_vm_and_may_not_do_admin_things(live: LiveServer) -> None:
    with live.client("admin") as admin:
        assert admin.post("/v1/hosts", json=HOST).status_code == 201
    body, alice = session(live, "alice", "alice-pw")
    assert body["owner"] == "ldap:alice" and body["owner_kind"] == "user" and body["role"] == "operator"
    assert body["groups"] == ["staff", "virtplane-operators"]
    expires = datetime.fromisoformat(body["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(hours=12))) < timedelta(minutes=1)
    with alice:
        assert alice.get("/v1/whoami").json() == {"name": body["name"], "role": "operator"}
        assert alice.post("/v1/vms", json=VM).status_code == 201
        start = {
            "kind": "VirtualMachineOperation",
            "metadata": {"name": "boot"},
            "spec": {"vm": "web-1", "type": "Start"},
        }
        eventually_sync(lambda: alice.get("/v1/vms/web-1").json()["status"]["phase"] == "Stopped")
        started = alice.post("/v1/operations", json=start)
        assert started.status_code == 201, started.text
        for admin_only in (
            alice.post("/v1/hosts", json={**HOST, "metadata": {"name": "h2"}}),
            alice.get("/v1/tokens"),
        ):
            assert admin_only.status_code == 403, admin_only.text
            assert "has role operator" in admin_only.json()["message"]
    with live.client("admin") as admin:
        tokens = {t["name"]: t for t in admin.get("/v1/tokens").json()["items"]}
        assert tokens[body["name"]]["owner"] == "ldap:alice" and tokens[body["name"]]["owner_kind"] == "user"
        assert tokens["test-admin"]["owner_kind"] == "service-account"
        audit = admin.get("/v1/audit")
        assert "alice-pw" not in audit.text
        records = audit.json()["items"]
    by_alice = [(r["verb"], r["kind"], r["name"]) for r in records if r["owner"] == "ldap:alice"]
    assert by_alice[0] == ("login", "Token", ""), records
    assert ("create", "VirtualMachine", "web-1") in by_alice, records
    assert all(r["token"] == body["name"] for r in records if r["owner"] == "ldap:alice")


def test_a_viewer_group_user_reads_only(live: LiveServer) -> None:
    body, bob = session(live, "bob", "bob-pw")
    assert body["role"] == "viewer"
    with bob:
        assert bob.get("/v1/vms").status_code == 200
        refused = bob.post("/v1/vms", json=VM)
        assert refused.status_code == 403 and "has role viewer" in refused.json()["message"], refused.text


def test_the_highest_role_of_the_users_groups_wins(live: LiveServer) -> None:
    body, carol = session(live, "carol", "carol-pw")  # a viewer and an admin
    carol.close()
    assert body["role"] == "admin"


def test_a_wrong_password_and_an_unknown_user_get_the_same_401(live: LiveServer) -> None:
    wrong = login(live, "alice", "not-her-password")
    nobody = login(live, "mallory", "alice-pw")
    odd = login(live, "alice)(uid=*", "x")  # escaped: a user nobody is, not a filter
    for refused in (wrong, nobody, odd):
        assert refused.status_code == 401, refused.text
        assert refused.json() == {"reason": "LoginFailed", "message": "the username or password is wrong"}
    empty = login(live, "alice", "")  # an empty password would be an anonymous bind
    assert empty.status_code == 422 and "password" in empty.text


def test_a_user_in_no_mapped_group_gets_403_with_the_reason(live: LiveServer) -> None:
    refused = login(live, "dave", "dave-pw")
    assert refused.status_code == 403, refused.text
    assert refused.json()["reason"] == "NoRole"
    assert "ldap:dave is in no group that has a role here (their groups: staff)" in refused.json()["message"]


def test_a_directory_that_is_down_is_a_503_saying_so(server_with: ServerWith, tmp_path: Path) -> None:
    own = start_slapd(tmp_path / "slapd")
    try:
        with server_with(own.url) as server:
            session(server, "bob", "bob-pw")[1].close()  # up: a login works
            own.stop()
            down = login(server, "bob", "bob-pw")
    finally:
        own.stop()
    assert down.status_code == 503, down.text
    assert down.json()["reason"] == "DirectoryUnavailable" and own.url.rstrip("/") in down.json()["message"]


def test_a_directory_that_never_answers_is_a_503_after_its_timeout(server_with: ServerWith) -> None:
    with socket.socket() as silent:  # listens, never reads: a hung LDAP server
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"ldap://127.0.0.1:{silent.getsockname()[1]}"
        with server_with(url, ldap={"timeout-seconds": 1}) as server:
            hung = login(server, "bob", "bob-pw")
    assert hung.status_code == 503 and hung.json()["reason"] == "DirectoryUnavailable", hung.text


def test_a_revoked_session_is_refused_at_its_next_request(live: LiveServer) -> None:
    body, alice = session(live, "alice", "alice-pw")
    with alice:
        assert alice.get("/v1/vms").status_code == 200  # cached now
        with live.client("admin") as admin:
            assert admin.delete(f"/v1/tokens/{body['name']}").status_code == 200
        refused = alice.get("/v1/vms")
    assert refused.status_code == 401 and refused.json()["reason"] == "TokenRevoked", refused.text


def test_logout_revokes_the_session_it_is_made_with(live: LiveServer) -> None:
    _, bob = session(live, "bob", "bob-pw")
    with bob:
        out = bob.post("/v1/logout")
        assert out.status_code == 200 and out.json()["revoked_by"] == "ldap:bob", out.text
        refused = bob.get("/v1/vms")
    assert refused.status_code == 401 and refused.json()["reason"] == "TokenRevoked"


def test_an_expired_session_is_refused_at_its_next_request(server_with: ServerWith) -> None:
    with server_with(**{"session-hours": 1 / 3600}) as server:  # one second
        body, bob = session(server, "bob", "bob-pw")
        with bob:
            assert bob.get("/v1/vms").status_code == 200  # cached before it expires
            expires_at = datetime.fromisoformat(body["expires_at"])
            eventually_sync(lambda: datetime.now(UTC) > expires_at, timeout=5)
            refused = bob.get("/v1/vms")
    assert refused.status_code == 401 and refused.json()["reason"] == "TokenExpired", refused.text


def test_logins_from_one_address_are_limited_before_the_directory_is_asked(server_with: ServerWith) -> None:
    with server_with(**{"login-attempts-per-minute": 3}) as server:
        answers = [login(server, "alice", f"guess-{n}").status_code for n in range(3)]
        limited = login(server, "alice", "alice-pw")  # the right one, too late
    assert answers == [401, 401, 401]
    assert limited.status_code == 429 and limited.json()["reason"] == "TooManyLogins", limited.text


def test_a_user_found_by_search_logs_in(server_with: ServerWith, tmp_path: Path) -> None:
    password = tmp_path / "bind-password"
    password.write_text(ROOT_PASSWORD + "\n")
    ldap = {
        "user-dn-template": None,
        "user-search-base": f"ou=people,{BASE}",
        "bind-dn": ROOT_DN,
        "bind-password-file": str(password),
    }
    with server_with(ldap=ldap) as server:
        found = login(server, "bob", "bob-pw")
        wrong = login(server, "bob", "nope")
    assert found.status_code == 201 and found.json()["owner"] == "ldap:bob", found.text
    assert wrong.status_code == 401


def test_logout_with_a_service_accounts_token_is_refused_and_the_token_keeps_working(
    live: LiveServer,
) -> None:
    with live.client("operator") as ci:
        refused = ci.post("/v1/logout")
        assert refused.status_code == 409 and refused.json()["reason"] == "NotASession", refused.text
        assert ci.get("/v1/vms").status_code == 200


def test_ldaps_and_starttls_check_the_servers_certificate(server_with: ServerWith, tmp_path: Path) -> None:
    own = start_slapd(tmp_path / "slapd", tls=True)
    assert own.ldaps_url is not None and own.ca_file is not None
    try:
        with server_with(own.ldaps_url, ldap={"ca-file": str(own.ca_file)}) as server:
            assert login(server, "bob", "bob-pw").status_code == 201
        with server_with(own.url, ldap={"ca-file": str(own.ca_file), "start-tls": True}) as server:
            assert login(server, "bob", "bob-pw").status_code == 201
        with server_with(own.ldaps_url) as server:  # the system's CAs do not know the test's
            untrusted = login(server, "bob", "bob-pw")
        with server_with(own.url, ldap={"start-tls": True}) as server:
            untrusted_starttls = login(server, "bob", "bob-pw")
    finally:
        own.stop()
    for refused in (untrusted, untrusted_starttls):
        assert refused.status_code == 503 and refused.json()["reason"] == "DirectoryUnavailable", refused.text
        assert "certificate" in refused.json()["message"], refused.text
