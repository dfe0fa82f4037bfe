"""``virtplane vnc VM``: a local port (on 127.0.0.1) for a native VNC viewer, forwarded to the
server's WebSocket ``/v1/vms/{name}/vnc``; the CLI never reaches a hypervisor host itself.

Each viewer that connects gets a WebSocket of its own (the server lets any number watch a
screen). The first one is opened before the port is, so that a refusal (the VM does not
exist or run, a viewer's token) is said at once, not when the viewer connects; its first
bytes wait for the viewer. There is no VNC password: the server's token check is the
authentication, and the port takes connections from this machine only. With ``--once`` the
command ends when the first viewer disconnects, else at Ctrl-C.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from virtplane.cli.completion import complete_vm
from virtplane.cli.console import open_websocket, vm_websocket_url
from virtplane.cli.context import state_of

if TYPE_CHECKING:  # websockets is imported by the command only (tests/cli/test_startup.py)
    from websockets.sync.client import ClientConnection

SUBPROTOCOL = "virtplane.vnc.v1"  # as the server's api/routes/display.py names it
LOOPBACK = "127.0.0.1"
CHUNK = 64 * 1024


def _to_viewer(ws: ClientConnection, viewer: socket.socket, why: list[str]) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        while True:
            message = ws.recv()
            viewer.sendall(message.encode() if isinstance(message, str) else message)
    except ConnectionClosed as closed:
        if closed.rcvd is not None and closed.rcvd.reason:
            why.append(closed.rcvd.reason)
    except OSError:
        pass  # the viewer left
    finally:
        with contextlib.suppress(OSError):
            viewer.shutdown(socket.SHUT_RDWR)


def relay(ws: ClientConnection, viewer: socket.socket) -> str:
    """Bytes both ways between ``viewer`` and ``ws`` until either ends; why the server ended it
    ("" when the viewer did)."""
    from websockets.exceptions import ConnectionClosed

    why: list[str] = []
    output = threading.Thread(target=_to_viewer, args=(ws, viewer, why), name="vnc-to-viewer", daemon=True)
    output.start()
    try:
        while data := viewer.recv(CHUNK):
            ws.send(data)
    except (OSError, ConnectionClosed):
        pass
    finally:
        ws.close()
        output.join(timeout=5)
        viewer.close()
    return why[0] if why else ""


def vnc(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The VM whose screen to show.", autocompletion=complete_vm)],
    port: Annotated[int, typer.Option(help="The local port (on 127.0.0.1); 0 picks a free one.")] = 0,
    once: Annotated[bool, typer.Option("--once", help="End when the first viewer disconnects.")] = False,
) -> None:
    """Forward a local port to a VM's screen for a native VNC viewer (operator role)."""
    state = state_of(ctx)
    url = vm_websocket_url(state.url, name, "vnc")

    def connect() -> ClientConnection:
        return open_websocket(url, state.url, state.token, state.tls(), SUBPROTOCOL)

    first: ClientConnection | None = connect()  # a refusal is said before the port opens
    with socket.create_server((LOOPBACK, port)) as server:
        bound = server.getsockname()[1]
        state.console.print(f"VNC of VM {name} on {LOOPBACK}:{bound}", soft_wrap=True, markup=False)
        state.err_console.print(
            f"Point a VNC viewer at it (no password): vncviewer {LOOPBACK}::{bound}; "
            + ("it ends when the viewer disconnects." if once else "Ctrl-C ends it."),
            soft_wrap=True,
            markup=False,
        )
        try:
            while True:
                viewer, _ = server.accept()
                ws, first = first or connect(), None
                if once:
                    why = relay(ws, viewer)
                    if why:
                        state.err_console.print(f"Screen closed: {why}", markup=False)
                    return
                threading.Thread(target=relay, args=(ws, viewer), name="vnc-viewer", daemon=True).start()
        except KeyboardInterrupt:
            return
        finally:
            if first is not None:
                first.close()


EPILOG = (
    "Examples:\n"
    "  virtplane vnc web-1                  # prints 127.0.0.1:PORT; then: vncviewer 127.0.0.1::PORT\n"
    "  virtplane vnc web-1 --port 5901 --once"
)


def register(app: typer.Typer) -> None:
    app.command(epilog=EPILOG)(vnc)


__all__ = ["SUBPROTOCOL", "register", "relay"]
