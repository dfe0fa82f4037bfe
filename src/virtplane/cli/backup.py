"""``virtplane backup -o FILE`` (admin): a consistent copy of a running server's store.

The server makes the copy (SQLite's online backup API, ``GET /v1/backup``) and streams it;
this writes it to a 0600 file beside FILE, checks it is a whole SQLite database, and only
then renames it to FILE, so an interrupted download never leaves a torn backup under the
name asked for. How to restore it: ``virtplane store-restore`` and the operator guide
(docs/backup-and-restore.md).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from virtplane.cli.backup_verify import EPILOG, verify
from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError
from virtplane.cli.images import transfer_progress

__all__ = ["register"]

SQLITE_MAGIC = b"SQLite format 3\x00"
READ_TIMEOUT_S = 300.0
"""A large store may take the server a while between chunks."""
"""The server makes the whole copy before it sends the first byte: a big store takes a while."""

_EPILOG = (
    "Examples:\n"
    "  virtplane backup -o virtplane-$(date +%F).db\n"
    "  virtplane backup -o /backups/virtplane.db --force\n\n"
    "Restore: stop the server, then `virtplane store-restore FILE --data-dir DIR`, then start it "
    "(docs/backup-and-restore.md). A PostgreSQL store is backed up with pg_dump instead."
)


def backup(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write the copy (a SQLite database, mode 0600).",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False,
) -> None:
    """Copy the store of the running server into FILE, consistently, while it serves (admin).

    The copy holds the tokens' hashes and the Secrets: keep it as private as the data directory.
    """
    if ctx.invoked_subcommand is not None:
        return  # `backup verify`: a VM backup's, not the store's
    if output is None:
        raise typer.BadParameter("the store's copy needs --output FILE", param_hint="'--output' / '-o'")
    state = state_of(ctx)
    if output.exists() and not force:
        raise CliError("FileExists", f"{output} exists; pass --force to replace it")
    directory = output.resolve().parent
    if not directory.is_dir():
        raise CliError("NoSuchDirectory", f"{directory} does not exist")
    descriptor, name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".part", dir=directory)
    partial = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as sink:
            size = _download(state, sink)
            sink.flush()
            os.fsync(sink.fileno())
        summary = _verified(partial)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    state.console.print(f"backup written to {output} ({_mib(size)}, {summary})")


def _download(state: CliState, sink: BinaryIO) -> int:
    with state.client.stream("/v1/backup", READ_TIMEOUT_S) as response:
        expected = int(response.headers.get("content-length", "0"))
        with transfer_progress(state, expected, "backup") as advance:
            for chunk in response.iter_bytes():
                sink.write(chunk)
                advance(len(chunk))
    written = sink.tell()
    if written != expected:
        raise CliError(
            "IncompleteBackup", f"the server sent {written} of {expected} bytes; nothing was written"
        )
    return written


def _verified(path: Path) -> str:
    """What the copy is (its schema revision), once SQLite has checked it is whole."""
    with path.open("rb") as head:
        if head.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise CliError("InvalidBackup", "the server did not send a SQLite database")
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as copy:
        check = copy.execute("PRAGMA quick_check").fetchone()
        revision = copy.execute("SELECT version_num FROM alembic_version").fetchone()
    if check != ("ok",):
        raise CliError("InvalidBackup", f"the copy failed SQLite's check: {check}")
    return f"schema {revision[0] if revision else 'unknown'}, checked"


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"


def register(app: typer.Typer) -> None:
    # a group so that `backup verify NAME` (a VM backup's) sits beside `backup -o FILE` (the store's)
    group = typer.Typer(epilog=_EPILOG)
    group.callback(invoke_without_command=True, epilog=_EPILOG)(backup)
    group.command("verify", epilog=EPILOG)(verify)
    app.add_typer(group, name="backup")
