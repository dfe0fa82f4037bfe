"""What ``serve`` prints at start: where it answers, the certificate to pin, the admin token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from virtplane.server import ServeOptions
    from virtplane.tls import ServerTls

ADMIN_TOKEN_FILE = "admin.token"


def print_fingerprint(console: Console, fingerprint: str) -> None:
    """The line operators pin the certificate from (``--tls-fingerprint``), verbatim: without
    ``emoji=False`` Rich prints the ':CD:' of a fingerprint as a disc."""
    console.print(
        f"TLS certificate SHA-256 fingerprint: {fingerprint}", soft_wrap=True, emoji=False, markup=False
    )


def announce(
    options: ServeOptions, token: tuple[str, bool] | None, db_url: str, tls: ServerTls | None
) -> None:
    """What serve prints at start: where it answers, and the admin token the first time."""
    console = Console(stderr=True)
    health = f"http://127.0.0.1:{options.health_port}"
    if token is None:  # the controllers' role
        console.print(
            f"[bold green]virtplane[/] controllers (store: {db_url}); /healthz and /metrics on {health}"
        )
        return
    url = f"{'https' if tls else 'http'}://{options.host}:{options.port}"
    console.print(f"[bold green]virtplane[/] API and dashboard on [bold]{url}[/]  (store: {db_url})")
    if options.workers > 1:
        controllers = f", the controllers' /healthz on {health}" if options.role == "all" else ""
        console.print(f"{options.workers} API processes{controllers}", soft_wrap=True)
    if tls is not None:
        print_fingerprint(console, tls.fingerprint)
    new_token = token[1]
    kept = options.data_dir / ADMIN_TOKEN_FILE
    # The token is printed once, when it is made: later starts (into a journal) say where it is.
    if new_token:
        console.print(f"admin token: made now, shown only this once (below), kept in {kept}", soft_wrap=True)
    else:
        console.print(f"admin token: in {kept}", soft_wrap=True)
    # one line to paste, also when stderr is not a terminal (Rich would wrap it at 80 columns)
    shown = token[0] if new_token else f"$(cat {kept})"
    console.print(f"  export VIRTPLANE_URL={url} VIRTPLANE_TOKEN={shown}", soft_wrap=True, markup=False)
    print(f"VIRTPLANE_URL={url}", flush=True)
