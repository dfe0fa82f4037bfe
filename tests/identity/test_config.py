"""``[identity]`` in ``serve --config``: the operator guide's example is what serve reads, and a
wrong key or value stops serve with the key's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.test_main import RecordedServeOptions, fake_server_module  # noqa: F401 (a fixture)
from tests.cli.test_serve_config import invoke, write
from tests.identity.conftest import GUIDE
from tests.test_readme import blocks
from virtplane.identity.config import (
    IdentityConfigError,
    IdentitySettings,
    LdapSettings,
    OidcSettings,
    identity_settings,
)


def guide_block() -> str:
    (block,) = [b for b in blocks(GUIDE.read_text(), "toml") if "[identity.ldap]" in b]
    return block


def test_serve_reads_the_guides_identity_example(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
) -> None:
    code, output = invoke("serve", "--config", str(write(tmp_path, 'host = "127.0.0.1"\n' + guide_block())))
    assert code == 0, output
    [options] = fake_server_module
    assert options.identity == IdentitySettings(
        ldap=LdapSettings(
            url="ldap://ldap.example.org:389",
            group_search_base="ou=groups,dc=example,dc=org",
            user_dn_template="uid={username},ou=people,dc=example,dc=org",
            timeout_s=5.0,
        ),
        roles={"virtplane-admins": "admin", "virtplane-operators": "operator", "virtplane-viewers": "viewer"},
        session_hours=12.0,
        login_attempts_per_minute=10,
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("[identity.roles]", '[identity.roles]\nops = "root"'), "identity.roles.ops = 'root'"),
        (("timeout-seconds = 5", 'timeout-seconds = 5\nbind-dn = "cn=x"'), "bind-dn and bind-password-file"),
        (
            ("timeout-seconds = 5", 'timeout-seconds = 5\ngroup-base = "x"'),
            "unknown key identity.ldap.group-base",
        ),
        (('url = "ldap://ldap.example.org:389"', 'url = "http://ldap.example.org"'), "identity.ldap.url"),
        (('url = "ldap://ldap.example.org:389"', 'url = "ldap://ldap.example.org:x"'), "identity.ldap.url"),
        (("session-hours = 12", "session-hours = 0"), "identity.session-hours"),
        (("user-dn-template = ", "# user-dn-template = "), "give user-dn-template or user-search-base"),
    ],
)
def test_a_wrong_identity_key_stops_serve_naming_it(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
    change: tuple[str, str],
    named: str,
) -> None:
    text = guide_block()
    assert change[0] in text
    code, output = invoke("serve", "--config", str(write(tmp_path, text.replace(change[0], change[1], 1))))
    assert code == 2 and fake_server_module == [], output
    assert str(tmp_path) in output and named in output, output


def test_the_highest_role_of_a_users_groups_wins() -> None:
    settings = identity_settings(
        {
            "ldap": {"url": "ldap://h", "group-search-base": "ou=g", "user-dn-template": "uid={username}"},
            "roles": {"a": "admin", "o": "operator", "v": "viewer"},
        },
        "t",
    )
    assert settings.role_for(["v", "a", "o", "x"]) == "admin"
    assert settings.role_for(["v", "o"]) == "operator"
    assert settings.role_for(["x"]) is None and settings.role_for([]) is None
    with pytest.raises(IdentityConfigError, match="no identity provider"):
        identity_settings({"roles": {"a": "admin"}}, "t")


@pytest.mark.parametrize(
    ("oidc", "named"),
    [
        ({"client-id": "v"}, "identity.oidc.issuer in t: missing"),
        ({"issuer": "https://sso"}, "identity.oidc.client-id in t: missing"),
        ({"issuer": "sso.example.org", "client-id": "v"}, "identity.oidc.issuer in t: an http"),
        ({"issuer": "https://sso", "client-id": "v", "scopes": "profile"}, "must include openid"),
        (
            {"issuer": "https://sso", "client-id": "v", "client-secret": "x"},
            "unknown key identity.oidc.client-secret",
        ),
        ({"issuer": "https://sso", "client-id": "v", "client-secret-file": "/nonexistent"}, "cannot read it"),
    ],
)
def test_a_wrong_oidc_key_is_named(oidc: dict[str, str], named: str) -> None:
    with pytest.raises(IdentityConfigError, match=re.escape(named)):
        identity_settings({"oidc": oidc}, "t")


def test_serve_reads_the_guides_oidc_example(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
) -> None:
    (oidc,) = [b for b in blocks(GUIDE.read_text(), "toml") if "[identity.oidc]" in b]
    code, output = invoke("serve", "--config", str(write(tmp_path, guide_block() + "\n" + oidc)))
    assert code == 0, output
    [options] = fake_server_module
    assert options.identity is not None and options.identity.oidc == OidcSettings(
        issuer="https://sso.example.org/realms/ops",
        client_id="virtplane",
        scopes="openid profile email groups",
        groups_claim="groups",
        username_claim="preferred_username",
    )
