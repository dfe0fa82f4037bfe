"""Who may log in and with which role: the ``[identity]`` table of ``serve --config``, in one place.

::

    [identity]
    session-hours = 12                 # a login's token expires this long after it was made
    login-attempts-per-minute = 10     # per client address; more: 429

    [identity.ldap]
    url = "ldap://ldap.example.org:389"
    user-dn-template = "uid={username},ou=people,dc=example,dc=org"
    group-search-base = "ou=groups,dc=example,dc=org"

    [identity.roles]                   # group -> role; a user's highest role wins
    virtplane-admins = "admin"
    virtplane-operators = "operator"
    staff = "viewer"

``[identity.oidc]`` (issuer, client-id, client-secret-file, scopes, groups-claim,
username-claim, redirect-url) adds an OpenID Connect login; the same ``[identity.roles]`` map
its groups claim. Instead of ``user-dn-template``, ``user-search-base`` (with ``user-filter``, and ``bind-dn`` plus
``bind-password-file`` if the directory does not let anonymous clients search) finds the user's
entry first. The password of the search account is read from a file, never from this table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from virtplane.domain.vocabulary import Role

ROLES = tuple(role.value for role in Role)  # least first: a user in several groups gets the most
"""Lowest first: a user in several mapped groups gets the highest of their roles."""


class IdentityConfigError(ValueError):
    """The ``[identity]`` table is wrong; the message names the key."""


@dataclass(frozen=True)
class LdapSettings:
    url: str
    group_search_base: str
    user_dn_template: str | None = None
    """``{username}`` is replaced by the login's username, escaped for a DN."""
    user_search_base: str | None = None
    user_filter: str = "(uid={username})"
    """``{username}`` is replaced by the login's username, escaped for a filter."""
    bind_dn: str | None = None
    bind_password: str | None = None
    group_filter: str = "(|(member={user_dn})(uniqueMember={user_dn}))"
    """``{user_dn}`` and ``{username}`` are replaced, escaped for a filter."""
    group_name_attribute: str = "cn"
    timeout_s: float = 5.0
    ca_file: str | None = None
    """The CAs the server's certificate must chain to (ldaps:// or start-tls); default: the system's."""
    start_tls: bool = False
    """Upgrade an ldap:// connection to TLS before the bind."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    """The provider's URL; its metadata is read from ``ISSUER/.well-known/openid-configuration``."""
    client_id: str
    client_secret: str | None = None
    scopes: str = "openid profile email"
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    """The ID token's claim that names the user (``sub`` if the token has none)."""
    redirect_url: str | None = None
    """The dashboard's callback as the provider must send the browser to it (default: this
    server's ``/auth/oidc/callback`` as the request reached it)."""
    timeout_s: float = 10.0


@dataclass(frozen=True)
class IdentitySettings:
    ldap: LdapSettings | None = None
    oidc: OidcSettings | None = None
    roles: Mapping[str, str] = field(default_factory=dict)
    """Group name → role."""
    session_hours: float = 12.0
    login_attempts_per_minute: int = 10

    def role_for(self, groups: Iterable[str]) -> str | None:
        """The highest role any of ``groups`` is mapped to; None if none of them is."""
        found = [self.roles[g] for g in groups if g in self.roles]
        return max(found, key=ROLES.index) if found else None


_LDAP_KEYS = {
    "url",
    "user-dn-template",
    "user-search-base",
    "user-filter",
    "bind-dn",
    "bind-password-file",
    "group-search-base",
    "group-filter",
    "group-name-attribute",
    "timeout-seconds",
    "ca-file",
    "start-tls",
}
_OIDC_KEYS = {
    "issuer",
    "client-id",
    "client-secret-file",
    "scopes",
    "groups-claim",
    "username-claim",
    "redirect-url",
    "timeout-seconds",
}
_TOP_KEYS = {"session-hours", "login-attempts-per-minute", "ldap", "oidc", "roles"}


def identity_settings(table: Any, source: str) -> IdentitySettings:
    """The settings of an ``[identity]`` table read from ``source``; IdentityConfigError naming the key."""
    top = _table(table, "identity", source, _TOP_KEYS)
    roles_table = _table(top.get("roles", {}), "identity.roles", source, None)
    roles: dict[str, str] = {}
    for group, role in roles_table.items():
        if role not in ROLES:
            raise IdentityConfigError(
                f"identity.roles.{group} = {role!r} in {source}: a role is one of {', '.join(ROLES)}"
            )
        roles[group] = role
    hours = top.get("session-hours", 12.0)
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not 0 < hours <= 24 * 366:
        raise IdentityConfigError(f"identity.session-hours in {source}: a number of hours, above 0")
    attempts = top.get("login-attempts-per-minute", 10)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise IdentityConfigError(
            f"identity.login-attempts-per-minute in {source}: a whole number, 1 or more"
        )
    ldap = _ldap(top["ldap"], source) if "ldap" in top else None
    oidc = _oidc(top["oidc"], source) if "oidc" in top else None
    if roles and ldap is None and oidc is None:
        raise IdentityConfigError(f"identity.roles in {source}: no identity provider to map groups of")
    return IdentitySettings(
        ldap=ldap, oidc=oidc, roles=roles, session_hours=float(hours), login_attempts_per_minute=attempts
    )


def _ldap(value: Any, source: str) -> LdapSettings:
    table = _table(value, "identity.ldap", source, _LDAP_KEYS)
    text = {
        key: _text(table, key, source)
        for key in _LDAP_KEYS - {"timeout-seconds", "start-tls"}
        if key in table
    }
    for needed in ("url", "group-search-base"):
        if needed not in text:
            raise IdentityConfigError(f"identity.ldap.{needed} in {source}: missing")
    if not _ldap_url(text["url"]):
        raise IdentityConfigError(
            f"identity.ldap.url in {source}: an ldap:// or ldaps:// URL with a host, e.g. ldap://ldap.example.org:389"
        )
    if ("user-dn-template" in text) == ("user-search-base" in text):
        raise IdentityConfigError(
            f"identity.ldap in {source}: give user-dn-template or user-search-base (one of them)"
        )
    if "user-dn-template" in text and "{username}" not in text["user-dn-template"]:
        raise IdentityConfigError(f"identity.ldap.user-dn-template in {source}: must hold {{username}}")
    if ("bind-dn" in text) != ("bind-password-file" in text):
        raise IdentityConfigError(f"identity.ldap in {source}: bind-dn and bind-password-file go together")
    password = None
    if "bind-password-file" in text:
        try:
            password = Path(text["bind-password-file"]).read_text().strip()
        except OSError as error:
            raise IdentityConfigError(
                f"identity.ldap.bind-password-file in {source}: cannot read it: {error.strerror or error}"
            ) from None
    timeout = table.get("timeout-seconds", 5.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 120:
        raise IdentityConfigError(
            f"identity.ldap.timeout-seconds in {source}: seconds, above 0 and at most 120"
        )
    start_tls = table.get("start-tls", False)
    if not isinstance(start_tls, bool):
        raise IdentityConfigError(f"identity.ldap.start-tls in {source}: true or false")
    if start_tls and text["url"].startswith("ldaps://"):
        raise IdentityConfigError(f"identity.ldap.start-tls in {source}: an ldaps:// URL is TLS already")
    if "ca-file" in text and not Path(text["ca-file"]).is_file():
        raise IdentityConfigError(f"identity.ldap.ca-file in {source}: no file {text['ca-file']}")
    return LdapSettings(
        url=text["url"],
        ca_file=text.get("ca-file"),
        start_tls=start_tls,
        group_search_base=text["group-search-base"],
        user_dn_template=text.get("user-dn-template"),
        user_search_base=text.get("user-search-base"),
        user_filter=text.get("user-filter", LdapSettings.user_filter),
        bind_dn=text.get("bind-dn"),
        bind_password=password,
        group_filter=text.get("group-filter", LdapSettings.group_filter),
        group_name_attribute=text.get("group-name-attribute", LdapSettings.group_name_attribute),
        timeout_s=float(timeout),
    )


def _oidc(value: Any, source: str) -> OidcSettings:
    table = _table(value, "identity.oidc", source, _OIDC_KEYS)
    text = {
        key: _text(table, key, source, "oidc") for key in _OIDC_KEYS - {"timeout-seconds"} if key in table
    }
    for needed in ("issuer", "client-id"):
        if needed not in text:
            raise IdentityConfigError(f"identity.oidc.{needed} in {source}: missing")
    for key in ("issuer", "redirect-url"):
        if key in text and not _http_url(text[key]):
            raise IdentityConfigError(f"identity.oidc.{key} in {source}: an http:// or https:// URL")
    if "openid" not in text.get("scopes", "openid").split():
        raise IdentityConfigError(f"identity.oidc.scopes in {source}: must include openid")
    secret = None
    if "client-secret-file" in text:
        try:
            secret = Path(text["client-secret-file"]).read_text().strip()
        except OSError as error:
            raise IdentityConfigError(
                f"identity.oidc.client-secret-file in {source}: cannot read it: {error.strerror or error}"
            ) from None
    timeout = table.get("timeout-seconds", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 120:
        raise IdentityConfigError(
            f"identity.oidc.timeout-seconds in {source}: seconds, above 0 and at most 120"
        )
    return OidcSettings(
        issuer=text["issuer"].rstrip("/"),
        client_id=text["client-id"],
        client_secret=secret,
        scopes=text.get("scopes", OidcSettings.scopes),
        groups_claim=text.get("groups-claim", OidcSettings.groups_claim),
        username_claim=text.get("username-claim", OidcSettings.username_claim),
        redirect_url=text.get("redirect-url"),
        timeout_s=float(timeout),
    )


def _http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _ldap_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return False
    return parts.scheme in ("ldap", "ldaps") and bool(parts.hostname) and parts.path in ("", "/")


def _table(value: Any, where: str, source: str, keys: set[str] | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise IdentityConfigError(f"{where} in {source}: must be a table ([{where}])")
    if keys is not None:
        unknown = sorted(set(value) - keys)
        if unknown:
            raise IdentityConfigError(
                f"unknown key {where}.{unknown[0]} in {source}; the keys are: {', '.join(sorted(keys))}"
            )
    return value


def _text(table: Mapping[str, Any], key: str, source: str, section: str = "ldap") -> str:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise IdentityConfigError(f"identity.{section}.{key} in {source}: a string, not empty")
    return value
