"""``virtplane login`` and ``logout`` against a live server whose logins are a real slapd's."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from tests.conftest import LiveServer
from tests.identity.oidc_provider import log_in_at_provider, running_provider
from tests.identity.test_oidc_login import _serving
from virtplane.cli.context import CliOverrides
from virtplane.cli.main import app
from virtplane.store.store import Store


@pytest.fixture(autouse=True)
def own_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("VIRTPLANE_TOKEN", raising=False)
    monkeypatch.delenv("VIRTPLANE_URL", raising=False)
    return home


def cli(server: LiveServer, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, ["--url", server.url, *args], input=input, env={"COLUMNS": "300"})


def test_login_keeps_a_private_session_that_later_commands_use(
    live: LiveServer, own_config_home: Path
) -> None:
    logged = cli(live, "login", "--username", "alice", input="alice-pw\n")
    assert logged.exit_code == 0, logged.output
    assert "alice-pw" not in logged.output, "the password is not echoed"
    assert f"logged in to {live.url} as ldap:alice (operator)" in logged.output
    kept = own_config_home / "virtplane" / "credentials.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    session = json.loads(kept.read_text())[live.url]
    assert session["owner"] == "ldap:alice" and "alice-pw" not in kept.read_text()

    listed = cli(live, "get", "vms")  # no --token: the kept session
    assert listed.exit_code == 0, listed.output
    refused = cli(live, "token", "list")  # an operator's session may not
    assert refused.exit_code == 5 and "has role operator" in refused.output, refused.output

    admin = CliRunner().invoke(
        app, ["--url", live.url, "--token", live.tokens["admin"], "token", "list"], env={"COLUMNS": "300"}
    )
    rows = {line.split()[0]: line.split() for line in admin.stdout.splitlines()[1:] if line.strip()}
    assert rows[session["name"]][1:4] == ["operator", "ldap:alice", "user"], admin.stdout
    assert rows["test-admin"][1:4] == ["admin", "test-admin", "service-account"], admin.stdout


def test_logout_revokes_the_session_and_forgets_it(live: LiveServer, own_config_home: Path) -> None:
    assert cli(live, "login", "-u", "bob", "--password-stdin", input="bob-pw\n").exit_code == 0
    kept = own_config_home / "virtplane" / "credentials.json"
    token = json.loads(kept.read_text())[live.url]["token"]

    out = cli(live, "logout")
    assert out.exit_code == 0 and f"logged out of {live.url}" in out.output, out.output
    assert live.url not in json.loads(kept.read_text())
    answer = httpx.get(f"{live.url}/v1/vms", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401 and answer.json()["reason"] == "TokenRevoked"
    again = cli(live, "logout")
    assert again.exit_code != 0 and "NotLoggedIn" in again.output, again.output


def test_a_wrong_password_is_refused_and_nothing_is_kept(live: LiveServer, own_config_home: Path) -> None:
    refused = cli(live, "login", "--username", "alice", input="wrong\n")
    assert refused.exit_code == 5, refused.output
    assert "LoginFailed" in refused.output and "the username or password is wrong" in refused.output
    assert not (own_config_home / "virtplane" / "credentials.json").exists()


def test_login_oidc_opens_the_browser_and_keeps_the_session(
    store: Store, tmp_path: Path, own_config_home: Path
) -> None:
    opened: list[str] = []

    def browser(url: str) -> None:  # a person logging in at the provider, then the redirect to the CLI
        opened.append(url)
        back_to_cli = log_in_at_provider(url, "sub-carol")
        assert back_to_cli.startswith("http://127.0.0.1:")
        assert httpx.get(back_to_cli, timeout=10).status_code == 200

    with running_provider() as provider, _serving(store, provider.issuer, tmp_path / "secret") as server:
        logged = CliRunner().invoke(
            app,
            ["--url", server.url, "login", "--oidc"],
            obj=CliOverrides(browser=browser),
            env={"COLUMNS": "300"},
        )
        assert logged.exit_code == 0, logged.output
        assert f"logged in to {server.url} as oidc:carol (admin)" in logged.output
        assert len(opened) == 1 and opened[0] in logged.output, (
            "the URL is also shown, for a browser elsewhere"
        )
        listed = cli(server, "token", "list", "-o", "json")  # an admin's session, kept
        assert listed.exit_code == 0 and '"owner": "oidc:carol"' in listed.stdout, listed.output


def test_login_oidc_gives_up_when_the_browser_never_comes_back(
    store: Store, tmp_path: Path, own_config_home: Path
) -> None:
    with running_provider() as provider, _serving(store, provider.issuer, tmp_path / "secret") as server:
        waited = CliRunner().invoke(
            app,
            ["--url", server.url, "login", "--oidc", "--timeout", "1"],
            obj=CliOverrides(browser=lambda url: None),
        )
    assert waited.exit_code != 0 and "no answer from the browser within 1 s" in waited.output, waited.output
    assert not (own_config_home / "virtplane" / "credentials.json").exists()
