"""``virtplane login``: a directory user's session token, kept for later commands; ``logout``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from virtplane.cli.client import ApiClient, CliError
from virtplane.cli.context import state_of
from virtplane.cli.credentials import forget_token, save_token, saved_token

__all__ = ["register"]


def login(
    ctx: typer.Context,
    username: Annotated[str, typer.Option("--username", "-u", help="Your directory (LDAP) username.")],
    password_stdin: Annotated[
        bool,
        typer.Option("--password-stdin", help="Read the password from the first line of stdin (scripts)."),
    ] = False,
) -> None:
    """Log in with your LDAP username and password; later commands to this server use the session.

    The password is asked for without echo (or read from stdin) and sent only to the server,
    which checks it with the directory. The session token is kept in
    $XDG_CONFIG_HOME/virtplane/credentials.json (0600) for this --url, and expires as the server says.
    """
    state = state_of(ctx)
    if password_stdin:
        password = typer.get_text_stream("stdin").readline().rstrip("\r\n")
    else:
        password = typer.prompt("Password", hide_input=True)
    with ApiClient(state.url, None, transport=state.transport) as client:  # no token: the login is one
        session = client.post("/v1/login", {"username": username, "password": password})
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
    "  virtplane get vms\n"
    "  virtplane logout"
)


def register(app: typer.Typer) -> None:
    app.command("login", epilog=_EPILOG)(login)
    app.command("logout", epilog=_EPILOG)(logout)
