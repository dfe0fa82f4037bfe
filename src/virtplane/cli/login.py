"""``virtplane login``: a directory user's session token, kept for later commands; ``logout``."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from virtplane.cli.context import CliState, state_of
from virtplane.cli.credentials import forget_token, save_token, saved_token
from virtplane.cli.errors import CliError

__all__ = ["register"]


def login(
    ctx: typer.Context,
    username: Annotated[
        str | None,
        typer.Option("--username", "-u", help="Your directory (LDAP) username.", show_default=False),
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="Read the password from the first line of stdin (scripts)."),
    ] = False,
    oidc: Annotated[
        bool,
        typer.Option("--oidc", help="Log in with the server's OpenID Connect provider, in your browser."),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0, help="With --oidc: seconds to wait for the browser.")
    ] = 300.0,
) -> None:
    """Log in with your LDAP username and password, or with --oidc in your browser; later
    commands to this server use the session.

    The password is asked for without echo (or read from stdin) and sent only to the server,
    which checks it with the directory. With --oidc, the CLI listens on 127.0.0.1 for the
    provider's answer and the server finishes the login. The session token is kept in
    $XDG_CONFIG_HOME/virtplane/credentials.json (0600) for this --url, and expires as the server says.
    """
    state = state_of(ctx)
    if oidc == (username is not None):
        raise typer.BadParameter("give --username (LDAP) or --oidc", param_hint="'--username' / '--oidc'")
    if oidc:
        _keep(state, _oidc_session(state, timeout))
        return
    assert username is not None
    if password_stdin:
        password = typer.get_text_stream("stdin").readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True)
    from virtplane.cli.client import ApiClient  # httpx: not for --help (issue 39)

    with ApiClient(state.url, None, transport=state.transport) as client:  # no token: the login is one
        session = client.post("/v1/login", {"username": username, "password": password})
    _keep(state, session)


def _oidc_session(state: CliState, timeout_s: float) -> dict[str, Any]:
    from virtplane.cli.client import ApiClient
    from virtplane.cli.loopback import LoopbackListener  # http.server: for --oidc only

    with LoopbackListener() as listener, ApiClient(state.url, None, transport=state.transport) as client:
        begun = client.post("/v1/login/oidc/start", {"redirect_uri": listener.redirect_uri})
        url = str(begun.get("authorization_url", ""))
        state.err_console.print(Text(f"Opening your browser to log in; if it does not open, visit:\n{url}"))
        if state.browser is not None:
            state.browser(url)
        else:
            import webbrowser  # here: only this command needs it

            webbrowser.open(url)
        answer = listener.wait(timeout_s)
        if answer is None:
            raise CliError("Timeout", f"no answer from the browser within {timeout_s:g} s")
        if answer.get("state") != begun.get("state"):
            raise CliError("OidcRefused", "the browser came back with another login's state")
        if "code" not in answer:
            said = f"{answer.get('error', '')}: {answer.get('error_description', '')}".strip(": ")
            raise CliError("OidcRefused", f"the provider did not log you in: {said or 'no code'}")
        return client.post("/v1/login/oidc", {"state": answer["state"], "code": answer["code"]})


def _keep(state: CliState, session: dict[str, Any]) -> None:
    token = session.get("token")
    if not isinstance(token, str) or not token:
        raise CliError("InvalidResponse", "the server's login answer holds no token")
    owner, role, expires = session.get("owner"), session.get("role"), session.get("expires_at")
    path = save_token(state.url, token, owner=owner, name=session.get("name"), expires_at=expires)
    state.console.print(Text(f"logged in to {state.url} as {owner} ({role}) until {expires}"))
    state.console.print(Text(f"the session token is kept in {path}", style="dim"))


def logout(ctx: typer.Context) -> None:
    """End the session: the server revokes its token, and this computer forgets it."""
    state = state_of(ctx)
    kept = saved_token(state.url)
    if state.token is None:
        raise CliError("NotLoggedIn", f"no session for {state.url}: nothing to log out of")
    try:
        revoked = state.client.post("/v1/logout", {})
    except CliError as error:
        if state.token != kept or error.reason not in ("TokenRevoked", "TokenExpired", "Unauthorized"):
            raise
        revoked = {}  # already refused by the server: forgetting it here is all there is to do
    if state.token == kept:
        forget_token(state.url)
    name = revoked.get("name") or "the session"
    state.console.print(Text(f"logged out of {state.url}: {name} revoked"))


_EPILOG = (
    "Examples:\n"
    "  virtplane --url https://virtplane.example.org:8470 login --username alice\n"
    "  virtplane login --oidc\n"
    "  virtplane get vms\n"
    "  virtplane logout"
)


def register(app: typer.Typer) -> None:
    app.command("login", epilog=_EPILOG)(login)
    app.command("logout", epilog=_EPILOG)(logout)
