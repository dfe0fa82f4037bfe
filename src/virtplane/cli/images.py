"""``virtplane image upload FILE --name N --pool P`` (admin): a file into an image library.

The SHA-256 is computed here when not given (the server checks the bytes it received against
it before any host is written), then the file is sent as it is read, with a progress bar on
a terminal. A refused or cut-off upload leaves nothing on the server or its hosts, so the same
command again starts clean.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from virtplane.cli.context import CliState, state_of
from virtplane.cli.errors import CliError

__all__ = ["chunks_of", "digest_of", "register", "transfer_progress"]

CHUNK_BYTES = 1024 * 1024
ANSWER_TIMEOUT_S = 900.0
"""After the last byte the server writes the file to every host of the library before it answers."""

_EPILOG = (
    "Examples:\n"
    "  virtplane image upload debian-12.qcow2 --name debian-12 --pool images\n"
    "  virtplane image upload debian-12.1.0-amd64-netinst.iso --name debian-installer --pool images --kind Iso\n"
    "  virtplane image upload disk.raw --name scratch --pool images --format raw --sha256 $(sha256sum disk.raw | cut -c1-64)\n\n"
    "The VM installs from an Iso image with spec.cdrom: NAME; take it out of the spec after the install."
)


def upload(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The image file.", exists=True, dir_okay=False, readable=True)],
    name: Annotated[str, typer.Option("--name", help="The new Image's name.")],
    pool: Annotated[
        str, typer.Option("--pool", help="The image library (a StoragePool with content: images).")
    ],
    sha256: Annotated[
        str | None,
        typer.Option("--sha256", help="The file's SHA-256 as published; computed here if left out."),
    ] = None,
    kind: Annotated[str, typer.Option("--kind", help="Disk, Kernel, Initrd or Iso.")] = "Disk",
    image_format: Annotated[
        str | None, typer.Option("--format", help="qcow2 (Disk's default), raw or iso (Iso's).")
    ] = None,
) -> None:
    """Upload FILE into an image library as a new Image, on every host of the library (admin)."""
    state = state_of(ctx)
    size = file.stat().st_size
    if size == 0:
        raise CliError("EmptyUpload", f"{file} is empty")
    digest = (sha256 or digest_of(state, file, size)).lower()
    params = {"pool": pool, "sha256": digest, "kind": kind}
    if image_format:
        params["format"] = image_format
    with transfer_progress(state, size, "upload") as advance:
        image = state.client.upload(
            f"/v1/images/{name}/content", chunks_of(file, advance), size, params, ANSWER_TIMEOUT_S
        )
    spec = image.get("spec", {})
    state.console.print(
        f"image {name} uploaded: {spec.get('file')} in library {pool} ({size} bytes, sha256 {digest}); "
        f"Ready once the hosts have checked it: virtplane get images {name}"
    )


def digest_of(state: CliState, file: Path, size: int) -> str:
    digest = hashlib.sha256()
    with transfer_progress(state, size, "sha256") as advance:
        for chunk in chunks_of(file, advance):
            digest.update(chunk)
    return digest.hexdigest()


def chunks_of(file: Path, advance: Callable[[int], None]) -> Iterator[bytes]:
    with file.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            advance(len(chunk))
            yield chunk


@contextlib.contextmanager
def transfer_progress(state: CliState, total: int, label: str) -> Any:
    """``advance(n)``: a progress bar on a terminal's stderr, nothing otherwise."""
    if not state.err_console.is_terminal:
        yield lambda _: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    columns = (TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=state.err_console, transient=True) as progress:
        task = progress.add_task(label, total=total or None)
        yield lambda n: progress.advance(task, n)


def register(app: typer.Typer) -> None:
    image_app = typer.Typer(help="Images in the image libraries.", epilog=_EPILOG, no_args_is_help=True)
    image_app.command("upload", epilog=_EPILOG)(upload)
    app.add_typer(image_app, name="image")
