"""OpenID Connect logins against a real provider (oidc-provider-mock, on authlib) on a live
server, configured with the operator guide's ``[identity.oidc]`` (its issuer pointed at the
test's provider): the dashboard's redirect flow, the CLI's flow, and their refusals."""

from __future__ import annotations

import base64
import hashlib
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.conftest import LiveServer, serving
from tests.identity.conftest import GUIDE
from tests.identity.oidc_provider import Provider, log_in_at_provider, running_provider
from tests.test_readme import blocks
from virtplane.api.routes.login import Logins
from virtplane.identity.config import identity_settings
from virtplane.store.store import Store

CLI_REDIRECT = "http://127.0.0.1:9/callback"  # nothing listens: the test reads the code off the redirect


def guide_oidc(issuer: str, secret_file: Path) -> dict[str, Any]:
    (block,) = [b for b in blocks(GUIDE.read_text(), "toml") if "[identity.oidc]" in b]
    (roles,) = [b for b in blocks(GUIDE.read_text(), "toml") if "[identity.ldap]" in b]
    table = tomllib.loads(block)["identity"]
    table["oidc"]["issuer"] = issuer
    table["oidc"]["client-secret-file"] = str(secret_file)  # the provider takes any secret, but one
    table["roles"] = tomllib.loads(roles)["identity"]["roles"]
    return table


@pytest.fixture
def provider() -> Iterator[Provider]:
    with running_provider() as running:
        yield running


def _serving(store: Store, issuer: str, secret_file: Path) -> Any:
    secret_file.write_text("client-secret\n")
    settings = identity_settings(guide_oidc(issuer, secret_file), "the test")

    def setup(app: Any) -> None:
        app.state.logins = Logins.of(settings)

    return serving(store, setup=setup)


@pytest.fixture
def live(store: Store, provider: Provider, tmp_path: Path) -> Iterator[LiveServer]:
    with _serving(store, provider.issuer, tmp_path / "oidc-secret") as server:
        yield server


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def test_the_dashboard_logs_in_through_the_provider_with_pkce(live: LiveServer, provider: Provider) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as browser:
        begun = browser.get("/auth/oidc/login")
        assert begun.status_code == 303, begun.text
        asked = query(begun.headers["location"])
        assert begun.headers["location"].startswith(f"{provider.issuer}/oauth2/authorize?")
        assert (
            asked["code_challenge_method"] == "S256"
            and asked["redirect_uri"] == f"{live.url}/auth/oidc/callback"
        )
        back = log_in_at_provider(begun.headers["location"], "sub-alice")
        assert back.startswith(f"{live.url}/auth/oidc/callback?")
        signed_in = browser.get(back)
        assert signed_in.status_code == 303, signed_in.text
        location = signed_in.headers["location"]
        assert location.startswith("/ui/#session=vp_")
        again = browser.get(back)  # the same code and state once more
    assert again.status_code == 401 and again.json()["reason"] == "OidcRefused", again.text
    [exchanged] = provider.sent("/oauth2/token")
    verifier = exchanged["code_verifier"][0]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == asked["code_challenge"], "the verifier the server kept is the challenge's"
    assert verifier not in back and verifier not in location

    token = location.removeprefix("/ui/#session=")
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as alice:
        assert alice.get("/v1/whoami").json()["role"] == "operator"
        assert alice.get("/v1/tokens").status_code == 403
    with live.client("admin") as admin:
        mine = [t for t in admin.get("/v1/tokens").json()["items"] if t["owner"] == "oidc:alice"]
    assert len(mine) == 1 and mine[0]["owner_kind"] == "user" and mine[0]["expires_at"]


def test_the_cli_flow_gives_a_session_for_the_code_its_listener_got(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as cli:
        begun = cli.post("/v1/login/oidc/start", json={"redirect_uri": CLI_REDIRECT})
        assert begun.status_code == 200, begun.text
        back = query(log_in_at_provider(begun.json()["authorization_url"], "sub-carol"))
        assert back["state"] == begun.json()["state"]
        finished = cli.post("/v1/login/oidc", json={"state": back["state"], "code": back["code"]})
        assert finished.status_code == 201, finished.text
        assert finished.json()["owner"] == "oidc:carol" and finished.json()["role"] == "admin"
        replayed = cli.post("/v1/login/oidc", json={"state": back["state"], "code": back["code"]})
    assert replayed.status_code == 401 and replayed.json()["reason"] == "OidcRefused"


def test_a_login_begun_for_the_dashboard_is_not_finished_by_the_cli_route(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as client:
        begun = client.get("/auth/oidc/login")
        back = query(log_in_at_provider(begun.headers["location"], "sub-alice"))
        crossed = client.post("/v1/login/oidc", json={"state": back["state"], "code": back["code"]})
    assert crossed.status_code == 401 and "begun for the dashboard" in crossed.json()["message"], crossed.text


def test_the_cli_redirect_must_be_a_loopback_listener(live: LiveServer) -> None:
    for elsewhere in (
        "https://evil.example/callback",
        "http://10.0.0.5:8000/callback",
        "http://127.0.0.1/cb",
    ):
        refused = httpx.post(f"{live.url}/v1/login/oidc/start", json={"redirect_uri": elsewhere}, timeout=10)
        assert refused.status_code == 422 and "loopback" in refused.text, (elsewhere, refused.text)


def test_a_user_in_no_mapped_group_gets_403(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as cli:
        begun = cli.post("/v1/login/oidc/start", json={"redirect_uri": CLI_REDIRECT}).json()
        back = query(log_in_at_provider(begun["authorization_url"], "sub-dave"))
        refused = cli.post("/v1/login/oidc", json={"state": back["state"], "code": back["code"]})
    assert refused.status_code == 403 and refused.json()["reason"] == "NoRole", refused.text
    assert "oidc:dave is in no group" in refused.json()["message"]


def test_a_provider_that_is_down_is_a_503(store: Store, tmp_path: Path) -> None:
    with running_provider() as gone:
        issuer = gone.issuer
    with _serving(store, issuer, tmp_path / "oidc-secret") as server:
        down = httpx.get(f"{server.url}/auth/oidc/login", timeout=30)
    assert down.status_code == 503 and down.json()["reason"] == "ProviderUnavailable", down.text
    assert issuer in down.json()["message"]


def test_a_revoked_oidc_session_is_refused_at_its_next_request(live: LiveServer) -> None:
    with httpx.Client(base_url=live.url, timeout=10) as cli:
        begun = cli.post("/v1/login/oidc/start", json={"redirect_uri": CLI_REDIRECT}).json()
        back = query(log_in_at_provider(begun["authorization_url"], "sub-alice"))
        session = cli.post("/v1/login/oidc", json={"state": back["state"], "code": back["code"]}).json()
    headers = {"Authorization": f"Bearer {session['token']}"}
    assert httpx.get(f"{live.url}/v1/vms", headers=headers).status_code == 200
    with live.client("admin") as admin:
        assert admin.delete(f"/v1/tokens/{session['name']}").status_code == 200
    refused = httpx.get(f"{live.url}/v1/vms", headers=headers)
    assert refused.status_code == 401 and refused.json()["reason"] == "TokenRevoked"


def test_the_server_says_whether_it_offers_oidc(live: LiveServer, store: Store) -> None:
    assert httpx.get(f"{live.url}/auth/oidc").json() == {"enabled": True}
