"""Token lifecycle on a live server over SQLite: revoke and expiry at once, no secret listed or stored."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import text

from tests.conftest import LiveServer, eventually_sync
from tests.store.upgrades import store_at
from virtplane.api.token_use import LastUse
from virtplane.store.store import Store, sqlite_url
from virtplane.store.tokens import token_hash


def _create(admin: httpx.Client, name: str, **extra: object) -> dict[str, object]:
    response = admin.post("/v1/tokens", json={"name": name, "role": "viewer", **extra})
    assert response.status_code == 201, response.text
    created: dict[str, object] = response.json()
    return created


def _get_vms(server: LiveServer, token: object) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/vms", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_a_revoked_token_is_refused_at_its_next_request(live_server: LiveServer) -> None:
    with live_server.client() as admin:
        created = _create(admin, "ci", description="the CI job", owner="svc-ci")
        assert _get_vms(live_server, created["token"]).status_code == 200  # now in the token cache
        revoked = admin.delete("/v1/tokens/ci")
        assert revoked.status_code == 200 and revoked.json()["revoked_by"] == "test-admin"
        refused = _get_vms(live_server, created["token"])
        assert refused.status_code == 401, refused.text
        assert (
            refused.json()["reason"] == "TokenRevoked"
            and "revoked by test-admin" in refused.json()["message"]
        )
        listed = {t["name"]: t for t in admin.get("/v1/tokens").json()["items"]}
        assert listed["ci"]["revoked_at"] is not None, "a revoked token stays listed, marked"
        assert admin.delete("/v1/tokens/nobody").status_code == 404


def test_an_expired_token_is_refused_at_its_next_request(live_server: LiveServer) -> None:
    with live_server.client() as admin:
        created = _create(admin, "short", expires_in_s=1)
        assert _get_vms(live_server, created["token"]).status_code == 200  # cached before it expires
        expires_at = datetime.fromisoformat(str(created["expires_at"]))
        eventually_sync(lambda: datetime.now(expires_at.tzinfo) > expires_at, timeout=5)
        refused = _get_vms(live_server, created["token"])
        assert refused.status_code == 401 and refused.json()["reason"] == "TokenExpired", refused.text


def test_the_list_shows_no_secret_and_the_last_use(live_server: LiveServer) -> None:
    with live_server.client() as admin:
        created = _create(admin, "grafana", description="dashboards", owner="svc-grafana")
        secret = str(created["token"])
        bare = str(_create(admin, "bare")["token"])  # nothing but a name and a role
        assert _get_vms(live_server, secret).status_code == 200
        used = eventually_sync(lambda: admin.get("/v1/tokens/grafana").json()["last_used_at"])
        assert used is not None
        listing = admin.get("/v1/tokens")
        for shown in (listing.text, admin.get("/v1/tokens/grafana").text):
            for token in (secret, bare):
                assert token not in shown and token_hash(token) not in shown
        grafana = next(t for t in listing.json()["items"] if t["name"] == "grafana")
        assert grafana["owner"] == "svc-grafana" and grafana["description"] == "dashboards"
        assert grafana["role"] == "viewer" and grafana["revoked_at"] is None


def test_the_database_holds_no_token_in_clear_text(tmp_path: Path, live_server: LiveServer) -> None:
    with live_server.client() as admin:
        secrets = [str(_create(admin, f"t{i}")["token"]) for i in range(3)]
        secrets += list(live_server.tokens.values())
    database = Path(live_server.store.url.removeprefix("sqlite:///"))
    files = [p for p in database.parent.iterdir() if p.name.startswith(database.name)]
    assert len(files) >= 2, files  # the database and its WAL at least
    raw = b"".join(p.read_bytes() for p in files)
    assert token_hash(secrets[0]).encode() in raw, "the hashes are there: the files were read"
    for secret in secrets:
        assert secret.encode() not in raw


def test_tokens_made_before_the_upgrade_keep_working(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "old.db")
    old = store_at(url, "0005")
    with old.engine.begin() as connection:  # as release 0005's create_token wrote it
        connection.execute(
            text(
                "INSERT INTO tokens (token_sha256, name, role, created_at) VALUES (:h, 'ops', 'operator', :t)"
            ),
            {"h": token_hash("vp_old-token"), "t": datetime(2026, 1, 1)},
        )
    old.close()
    store = Store(url)
    try:
        store.migrate()
        assert store.token_role("vp_old-token") == ("ops", "operator")
        info = store.token_named("ops")
        assert info.owner == "ops" and info.description == "" and info.expires_at is None
        assert info.revoked_at is None
    finally:
        store.close()


def test_the_last_use_is_written_at_most_once_a_minute(store: Store) -> None:
    store.create_token("busy", "viewer")
    uses = LastUse(store)
    uses.note("busy")  # no running loop: written in this thread
    first = store.token_named("busy").last_used_at
    assert first is not None
    store.token_used("busy", datetime(2000, 1, 1, tzinfo=UTC))  # a mark a second write would replace
    for _ in range(100):
        uses.note("busy")
    assert store.token_named("busy").last_used_at == datetime(2000, 1, 1, tzinfo=UTC)
