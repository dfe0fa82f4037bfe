"""OpenID Connect logins (``[identity.oidc]``): the dashboard's and the CLI's.

Dashboard: ``GET /auth/oidc/login`` sends the browser to the provider, which sends it back
to ``GET /auth/oidc/callback``; the server finishes the login (``identity.oidc``) and sends
the browser to ``/ui/#session=TOKEN`` (a fragment: never sent to a server or logged).

CLI: ``POST /v1/login/oidc/start`` with the CLI's loopback listener as ``redirect_uri``
gives the provider's URL to open; the provider sends the browser to the listener with the
code, and ``POST /v1/login/oidc`` with that code and the state gives the session token.

Either way the session is a token owned by ``oidc:USERNAME`` with the role the ID token's
groups map to, as for an LDAP login (``login.open_session``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from virtplane.api.audit import client_address
from virtplane.api.errors import ApiError
from virtplane.api.routes.login import Logins, configured_logins, open_session
from virtplane.identity.oidc import OidcLogin, OidcRefused, OidcUnavailable

router = APIRouter(tags=["Login"])

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "The provider refused the login, or the state is unknown or used (OidcRefused)."},
    403: {"description": "The user is in no group mapped to a role (NoRole)."},
    404: {"description": "The server has no [identity.oidc] (LoginNotConfigured)."},
    429: {"description": "Too many logins from this client address (TooManyLogins)."},
    503: {"description": "The OpenID provider did not answer (ProviderUnavailable)."},
}


def _oidc(request: Request) -> tuple[Logins, OidcLogin]:
    logins = configured_logins(request, "oidc")
    assert logins.oidc is not None
    logins.attempts.take(client_address(request.scope))  # before the provider is asked
    return logins, logins.oidc


def _begin(oidc: OidcLogin, redirect_uri: str, purpose: str) -> tuple[str, str]:
    try:
        return oidc.begin(redirect_uri, purpose)
    except OidcUnavailable as down:
        raise ApiError(503, "ProviderUnavailable", f"cannot begin the login now: {down}") from None


def _finish(
    request: Request, logins: Logins, oidc: OidcLogin, state: str, code: str, purpose: str
) -> dict[str, Any]:
    try:
        user, begun_for = oidc.finish(state, code)
    except OidcRefused as refused:
        raise ApiError(401, "OidcRefused", str(refused)) from None
    except OidcUnavailable as down:
        raise ApiError(503, "ProviderUnavailable", f"cannot finish the login now: {down}") from None
    if begun_for != purpose:  # a dashboard's state brought to the CLI's finish, or the reverse
        raise ApiError(401, "OidcRefused", f"this login was begun for the {begun_for}, not the {purpose}")
    return open_session(request, logins, "oidc", user.username, user.groups)


@router.get(
    "/auth/oidc", operation_id="oidc_enabled", summary="Whether this server offers an OpenID Connect login"
)
def oidc_enabled(request: Request) -> dict[str, bool]:
    logins: Logins | None = getattr(request.app.state, "logins", None)
    return {"enabled": logins is not None and logins.oidc is not None}


@router.get(
    "/auth/oidc/login",
    operation_id="oidc_login",
    summary="The dashboard's login: a redirect to the OpenID provider",
    response_class=RedirectResponse,
    status_code=303,
    responses=_ERRORS,
)
def oidc_login(request: Request) -> RedirectResponse:
    _, oidc = _oidc(request)
    redirect_uri = oidc.settings.redirect_url or str(request.url_for("oidc_callback"))
    url, _ = _begin(oidc, redirect_uri, "dashboard")
    return RedirectResponse(url, status_code=303)


@router.get(
    "/auth/oidc/callback",
    operation_id="oidc_callback",
    summary="Where the provider sends the dashboard's browser back: a redirect to the dashboard, signed in",
    response_class=RedirectResponse,
    status_code=303,
    responses=_ERRORS,
)
def oidc_callback(
    request: Request,
    state: str = Query(default="", max_length=512),
    code: str = Query(default="", max_length=4096),
    error: str = Query(default="", max_length=256),
    error_description: str = Query(default="", max_length=1024),
) -> RedirectResponse:
    logins, oidc = _oidc(request)
    if error or not code or not state:
        said = f"{error}: {error_description}".strip(": ") or "no code and state in the callback"
        raise ApiError(401, "OidcRefused", f"the provider did not log you in: {said}")
    session = _finish(request, logins, oidc, state, code, "dashboard")
    return RedirectResponse(f"/ui/#session={session['token']}", status_code=303)


class StartRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    redirect_uri: str = Field(
        max_length=512, description="The CLI's loopback listener, http://127.0.0.1:PORT/... (RFC 8252)"
    )

    @field_validator("redirect_uri")
    @classmethod
    def _loopback(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS or parts.port is None:
            raise ValueError("the CLI's redirect_uri is http://127.0.0.1:PORT/... (a loopback listener)")
        return value


class FinishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: str = Field(min_length=1, max_length=512)
    code: str = Field(min_length=1, max_length=4096)


@router.post(
    "/v1/login/oidc/start",
    operation_id="oidc_cli_start",
    summary="The CLI's login: the provider's URL to open, coming back to the CLI's loopback listener",
    responses=_ERRORS,
)
def oidc_cli_start(request: Request, body: StartRequest) -> dict[str, str]:
    _, oidc = _oidc(request)
    url, state = _begin(oidc, body.redirect_uri, "cli")
    return {"authorization_url": url, "state": state}


@router.post(
    "/v1/login/oidc",
    operation_id="oidc_cli_finish",
    status_code=201,
    summary="The CLI's login, finished with the code the provider sent to its listener: a session token",
    responses=_ERRORS,
)
def oidc_cli_finish(request: Request, body: FinishRequest) -> dict[str, Any]:
    logins, oidc = _oidc(request)
    return _finish(request, logins, oidc, body.state, body.code, "cli")
