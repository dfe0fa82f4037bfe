"""``POST /v1/login``: a user's LDAP username and password for a session token; ``POST /v1/logout``.

The session token is an API token like any other (listed, revoked and audited by its name),
owned by ``ldap:USERNAME``, with the role the user's groups map to (``[identity.roles]``; the
highest wins) and an expiry ``[identity] session-hours`` away. The role is the one the groups
gave at login: a change in the directory applies at the next login.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from virtplane.api.audit import client_address
from virtplane.api.auth import PRINCIPAL_KEY, Principal, Role, require
from virtplane.api.context import ApiContext
from virtplane.api.errors import ApiError
from virtplane.api.limits import LoginAttempts
from virtplane.domain.names import generated_name, random_suffix
from virtplane.identity.config import IdentitySettings
from virtplane.identity.ldap import DirectoryUnavailable, LdapDirectory, LoginRefused
from virtplane.identity.oidc import OidcLogin
from virtplane.store.database import utcnow
from virtplane.store.errors import AlreadyExists

router = APIRouter(tags=["Login"])


@dataclass
class Logins:
    """What ``/v1/login`` needs: the settings, the directory, the attempts per client."""

    settings: IdentitySettings
    ldap: LdapDirectory | None
    attempts: LoginAttempts
    oidc: OidcLogin | None = None

    @classmethod
    def of(cls, settings: IdentitySettings) -> Logins:
        directory = LdapDirectory(settings.ldap) if settings.ldap is not None else None
        oidc = OidcLogin(settings.oidc) if settings.oidc is not None else None
        return cls(settings, directory, LoginAttempts(settings.login_attempts_per_minute), oidc)


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(min_length=1, max_length=256, description="The user's name in the directory")
    password: str = Field(min_length=1, max_length=1024, description="Checked by the directory, never kept")

    @field_validator("username")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable() or value != value.strip():
            raise ValueError("a username has no control characters and no leading or trailing space")
        return value


def configured_logins(request: Request, provider: str) -> Logins:
    """The server's logins if ``provider`` (ldap, oidc) is configured; 404 LoginNotConfigured otherwise."""
    logins: Logins | None = getattr(request.app.state, "logins", None)
    if logins is None or getattr(logins, provider) is None:
        raise ApiError(
            404,
            "LoginNotConfigured",
            f"this server has no {provider.upper()} login ([identity.{provider}] in serve --config)",
        )
    return logins


@router.post(
    "/v1/login",
    operation_id="login",
    status_code=201,
    summary="An LDAP user's session token (no token needed); the token is shown in this answer only",
    responses={
        401: {"description": "The username or the password is wrong, never said which (LoginFailed)."},
        403: {"description": "The user is in no group mapped to a role (NoRole); the message lists them."},
        404: {"description": "The server has no [identity.ldap] (LoginNotConfigured)."},
        429: {"description": "Too many logins from this client address (TooManyLogins)."},
        503: {"description": "The LDAP server did not answer or failed the look-up (DirectoryUnavailable)."},
    },
)
def login(request: Request, body: LoginRequest) -> dict[str, Any]:
    logins = configured_logins(request, "ldap")
    assert logins.ldap is not None
    client = client_address(request.scope)
    logins.attempts.take(client)  # before the directory is asked
    try:
        user = logins.ldap.authenticate(body.username, body.password)
    except LoginRefused:
        raise ApiError(401, "LoginFailed", "the username or password is wrong") from None
    except DirectoryUnavailable as down:
        raise ApiError(503, "DirectoryUnavailable", f"cannot check the login now: {down}") from None
    return open_session(request, logins, "ldap", user.username, user.groups)


def open_session(
    request: Request, logins: Logins, provider: str, username: str, groups: tuple[str, ...]
) -> dict[str, Any]:
    """A session token for ``provider:username`` with the highest role of ``groups`` (403 NoRole
    if none is mapped); its document, the token and the groups."""
    owner = f"{provider}:{username}"
    role = logins.settings.role_for(groups)
    if role is None:
        shown = ", ".join(groups) or "none"
        raise ApiError(
            403,
            "NoRole",
            f"{owner} is in no group that has a role here (their groups: {shown}); "
            "an administrator maps groups to roles in [identity.roles]",
        )
    ctx: ApiContext = request.app.state.ctx
    client = client_address(request.scope)
    expires_at = utcnow() + timedelta(hours=logins.settings.session_hours)
    label = re.sub(r"[^a-z0-9]+", "-", username.lower()).strip("-") or "user"
    while True:
        name = generated_name(label, provider, random_suffix())
        try:
            token = ctx.store.create_token(
                name, role, owner=owner, description=f"login from {client}", expires_at=expires_at
            )
            break
        except AlreadyExists:  # the same suffix drawn twice for one user: draw again
            continue
    request.scope[PRINCIPAL_KEY] = Principal(name, Role(role), owner)  # the audit log's who
    ctx.store.record_event("Token", name, "Created", f"login of {owner} as {role}")
    return {**ctx.store.token_named(name).document(), "token": token, "groups": list(groups)}


@router.post(
    "/v1/logout",
    operation_id="logout",
    summary="End the login session this request is made with: its token is revoked",
    responses={409: {"description": "The token is a service account's, not a login's (NotASession)."}},
)
def logout(request: Request, principal: Principal = Depends(require(Role.VIEWER))) -> dict[str, Any]:
    ctx: ApiContext = request.app.state.ctx
    # only a login's session: a script that logs out with a service account's token would
    # otherwise stop every job that shares it
    if ctx.store.token_named(principal.name).owner_kind != "user":
        raise ApiError(
            409,
            "NotASession",
            f"{principal.name} is a service account's token, not a login's session: "
            "an admin revokes it (virtplane token revoke NAME)",
        )
    revoked = ctx.store.revoke_token(principal.name, by=principal.owner or principal.name)
    request.app.state.tokens.invalidate()
    return revoked.document()
