"""API token commands (admin): create (the token is shown once), list (never the token), revoke."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer
from rich.text import Text

from virtplane.cli.context import state_of
from virtplane.cli.output import OutputFormat, age, cell_text, new_table, print_structured, print_table
from virtplane.domain.vocabulary import Role

__all__ = ["parse_duration_s", "register"]


OutputOption = Annotated[
    OutputFormat, typer.Option("--output", "-o", case_sensitive=False, help="table, json or yaml.")
]
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration_s(text: str) -> int:
    """``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` in seconds; BadParameter otherwise."""
    match = re.fullmatch(r"(\d{1,9})([smhdw])", text.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise typer.BadParameter(
            f"{text!r} is not a duration: a positive number and s, m, h, d or w, e.g. 30d"
        )
    return int(match.group(1)) * _UNITS_S[match.group(2)]


def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name (its id).", show_default=False)],
    role: Annotated[Role, typer.Option("--role", case_sensitive=False, help="What the token may do.")],
    description: Annotated[str, typer.Option("--description", help="What it is for.")] = "",
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="The user or service account it belongs to (default: its name).",
            show_default=False,
        ),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in", help="Expire after this long: 12h, 30d, 2w (default: never).", show_default=False
        ),
    ] = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Create an API token (admin). The token is shown only once."""
    state = state_of(ctx)
    body: dict[str, Any] = {"name": name, "role": role.value, "description": description}
    if owner is not None:
        body["owner"] = owner
    if expires_in is not None:
        body["expires_in_s"] = parse_duration_s(expires_in)
    created = state.client.post("/v1/tokens", body)
    if print_structured(created, output):
        return
    expiry = f", expires {created['expires_at']}" if created.get("expires_at") else ""
    state.console.print(
        Text(f"token {created.get('name', name)} ({created.get('role', role.value)}{expiry}) created:")
    )
    state.console.print(Text(str(created.get("token", "")), style="bold"))
    state.console.print(Text("Use it with --token or: export VIRTPLANE_TOKEN=<token>", style="dim"))


def token_list(ctx: typer.Context, output: OutputOption = OutputFormat.TABLE) -> None:
    """List the API tokens (admin): never the tokens themselves. KIND: a user's login session
    (owner ldap:NAME) or a service account's token (made with `token create`)."""
    state = state_of(ctx)
    listed = state.client.request("GET", "/v1/tokens")
    if print_structured(listed, output):
        return
    items = listed.get("items", []) if isinstance(listed, dict) else []
    table = new_table(
        ["NAME", "ROLE", "OWNER", "KIND", "STATE", "AGE", "LAST USED", "EXPIRES", "DESCRIPTION"]
    )
    for token in items:
        revoked = token.get("revoked_at")
        table.add_row(
            cell_text(token.get("name")),
            cell_text(token.get("role")),
            cell_text(token.get("owner")),
            cell_text(token.get("owner_kind")),
            "Revoked" if revoked else "Active",
            age(token.get("created_at")),
            age(token.get("last_used_at")) if token.get("last_used_at") else "never",
            cell_text(token.get("expires_at") or "never"),
            cell_text(token.get("description")),
        )
    print_table(state.console, table)


def token_revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name.", show_default=False)],
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Revoke an API token (admin): its next request is refused. It stays listed, as revoked."""
    state = state_of(ctx)
    revoked = state.client.delete("tokens", name)
    if print_structured(revoked, output):
        return
    state.console.print(Text(f"token {name} revoked"))


_TOKEN_EPILOG = (
    "Examples:\n"
    "  virtplane token create ci --role operator --owner svc-ci --expires-in 30d\n"
    "  virtplane token create grafana --role viewer -o json\n"
    "  virtplane token list\n"
    "  virtplane token revoke ci"
)


def register(app: typer.Typer) -> None:
    token_app = typer.Typer(help="API tokens.", epilog=_TOKEN_EPILOG, no_args_is_help=True)
    token_app.command("create", epilog=_TOKEN_EPILOG)(token_create)
    token_app.command("list", epilog=_TOKEN_EPILOG)(token_list)
    token_app.command("revoke", epilog=_TOKEN_EPILOG)(token_revoke)
    app.add_typer(token_app, name="token")
