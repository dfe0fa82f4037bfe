"""``virtplane secrets rotate-key``: run on the server's machine, with the server stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from virtplane.cli.errors import CliError

__all__ = ["register"]

secrets_app = typer.Typer(help="The key that seals Secrets' passwords at rest (on the server's machine).")


@secrets_app.command(
    "rotate-key",
    epilog="Examples:\n"
    "  systemctl stop virtplane\n"
    "  virtplane secrets rotate-key --data-dir /var/lib/virtplane\n"
    "  systemctl start virtplane",
)
def rotate_key_command(
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="The server's data directory (its database and secrets.key).")
    ] = Path("virtplane-data"),
    db: Annotated[
        str | None,
        typer.Option("--db", help="The server's --db, if it has one.", show_default=False),
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--secrets-key-file", help="The server's --secrets-key-file, if it has one.", show_default=False
        ),
    ] = None,
) -> None:
    """Make a new secrets key and seal every Secret again with it; the old key is dropped once
    all are (until then the file holds both). The server must be stopped."""
    from virtplane.keys import RotateRefused, rotate_key  # the store: only this command needs it
    from virtplane.store.sealing import SecretsKeyError

    try:
        count = rotate_key(data_dir, db, key_file)
    except (RotateRefused, SecretsKeyError) as error:
        raise CliError("RotateRefused", str(error)) from None
    typer.echo(
        f"secrets key rotated: {count} secret(s) sealed with the new key in {key_file or data_dir / 'secrets.key'}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(secrets_app, name="secrets")
