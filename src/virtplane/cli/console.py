"""``virtplane console VM``: the terminal on a VM's serial console, through the server's
WebSocket (``/v1/vms/{name}/console``); the CLI never reaches a hypervisor host itself.

On a terminal, stdin goes raw (every key to the guest, which echoes) and ``Ctrl-]``
detaches; the terminal's settings come back however the session ends. Without a terminal
(a pipe, a script) it works line by line: each line is sent with a carriage return (the
Enter key), a line holding ``Ctrl-]`` detaches, and at the end of the input it stays until
the guest has been quiet for ``--linger`` seconds, so the last answer is printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import ssl
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO
from urllib.parse import quote

import typer

from virtplane.cli.completion import complete_vm
from virtplane.cli.context import state_of
from virtplane.cli.errors import ApiError, CliError, ServerUnreachable
from virtplane.cli.tls import untrusted_from

if TYPE_CHECKING:  # websockets is imported by the command only: every other command starts sooner
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import ClientConnection

SUBPROTOCOL = "virtplane.console.v1"  # as the server's api/routes/console.py names it
ESCAPE = b"\x1d"  # Ctrl-]
ENTER = b"\r"


def vm_websocket_url(base_url: str, vm: str, leaf: str) -> str:
    """The ws:// or wss:// URL of ``/v1/vms/{vm}/{leaf}`` on the server at ``base_url``."""
    scheme, sep, rest = base_url.rstrip("/").partition("://")
    ws_scheme = {"http": "ws", "https": "wss"}.get(scheme.lower())
    if not sep or ws_scheme is None:
        raise CliError("InvalidURL", f"the server URL {base_url} is not http:// or https://")
    return f"{ws_scheme}://{rest}/v1/vms/{quote(vm, safe='')}/{leaf}"


def console_url(base_url: str, vm: str) -> str:
    return vm_websocket_url(base_url, vm, "console")


def _refusal(exc: InvalidStatus) -> ApiError:
    response = exc.response
    body: Any = None
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        body = json.loads(response.body or b"")
    if isinstance(body, dict) and "reason" in body:
        return ApiError(response.status_code, str(body["reason"]), str(body.get("message", "")))
    return ApiError(response.status_code, f"HTTP{response.status_code}", response.reason_phrase)


def open_websocket(
    url: str, base_url: str, token: str | None, tls: ssl.SSLContext | None, subprotocol: str = SUBPROTOCOL
) -> ClientConnection:
    """A WebSocket to the server with the token in the header; its refusal as an ``ApiError``."""
    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
    from websockets.sync.client import connect
    from websockets.typing import Subprotocol

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return connect(
            url,
            additional_headers=headers,
            subprotocols=[Subprotocol(subprotocol)],
            open_timeout=15,
            ssl=tls if url.startswith("wss:") else None,
        )
    except InvalidStatus as exc:
        raise _refusal(exc) from None
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        untrusted = untrusted_from(exc, base_url)
        if untrusted is not None:
            raise untrusted from None
        raise ServerUnreachable(base_url, str(exc) or type(exc).__name__) from None


class _Session:
    """Guest output to ``out`` on a thread of its own; remembers how the server ended it."""

    def __init__(self, ws: ClientConnection, out: BinaryIO) -> None:
        self.ws = ws
        self._out = out
        self.ended_by_server = threading.Event()
        self.output = threading.Event()  # set on each arrival; the linger waits for a quiet spell
        self.close_reason = ""
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._pump, name="console-output", daemon=True)
        self._thread.start()

    @property
    def wake_fd(self) -> int:
        """Readable once the server ended the session (for ``select`` beside stdin)."""
        return self._wake_r

    def _pump(self) -> None:
        from websockets.exceptions import ConnectionClosed

        self.close_reason = "the connection was lost"
        try:
            while True:
                message = self.ws.recv()
                self._out.write(message.encode() if isinstance(message, str) else message)
                self._out.flush()
                self.output.set()
        except ConnectionClosed as closed:
            if closed.rcvd is not None:  # 1012 with no reason: the server is shutting down
                self.close_reason = closed.rcvd.reason or f"by the server (code {closed.rcvd.code})"
        finally:
            self.ended_by_server.set()
            self.output.set()
            os.write(self._wake_w, b"x")

    def send(self, data: bytes) -> bool:
        """False once the session is over."""
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(data)
        except ConnectionClosed:
            return False
        return True

    def finish(self) -> None:
        self.ws.close()
        self._thread.join(timeout=5)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _input(session: _Session, fd: int) -> Iterator[bytes]:
    """Chunks of ``fd`` as they come (b"" at its end); stops when the server ends the session."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        selector.register(session.wake_fd, selectors.EVENT_READ)
        while True:
            ready = {key.fd for key, _ in selector.select()}
            if session.wake_fd in ready:
                return
            data = os.read(fd, 1024)
            yield data
            if not data:
                return


def _raw_session(session: _Session, fd: int) -> bool:
    """Keys to the guest until Ctrl-] (True) or the server ends it (False); the terminal is raw."""
    for data in _input(session, fd):
        before, escape, _ = data.partition(ESCAPE)
        if before and not session.send(before):
            return False
        if escape or not data:
            return True
    return False


def _line_session(session: _Session, fd: int, linger_s: float) -> bool:
    """Each line to the guest with Enter; True when the input ended or detached."""
    pending = b""
    for data in _input(session, fd):
        pending += data if data else b"\n" * bool(pending)  # a last line without its newline
        *lines, pending = pending.split(b"\n")
        for line in lines:
            before, escape, _ = line.partition(ESCAPE)
            text = before.rstrip(b"\r")
            if (text or not escape) and not session.send(text + ENTER):
                return False
            if escape:
                return True
        if not data:
            break
    else:
        return False  # the server ended it
    while True:  # the input is over: print what is still coming, until the guest is quiet
        session.output.clear()
        if not session.output.wait(linger_s):
            return True
        if session.ended_by_server.is_set():
            return False


def console(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(help="The VM whose serial console to attach to.", autocompletion=complete_vm)
    ],
    linger: Annotated[
        float,
        typer.Option(
            help="Without a terminal: at the end of the input, wait until the guest is quiet this long."
        ),
    ] = 1.0,
    takeover: Annotated[
        bool,
        typer.Option(
            "--takeover", help="Admin: end the session that holds the console (it is told who) and attach."
        ),
    ] = False,
) -> None:
    """Attach to a VM's serial console (operator role). Ctrl-] detaches."""
    state = state_of(ctx)
    import termios  # here: only a terminal session sets its mode (issue 39)
    import tty

    url = console_url(state.url, name) + ("?takeover=true" if takeover else "")
    ws = open_websocket(url, state.url, state.token, state.tls())
    stdin = sys.stdin.buffer
    interactive = stdin.isatty()
    if interactive:
        state.err_console.print(f"Connected to the serial console of VM {name}; Ctrl-] detaches.")
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd) if interactive else None
    if interactive:  # raw before the guest's first byte shows: keys typed at its prompt are the guest's
        tty.setraw(fd, termios.TCSANOW)
    try:
        session = _Session(ws, sys.stdout.buffer)
        try:
            detached = _raw_session(session, fd) if interactive else _line_session(session, fd, linger)
        finally:
            session.finish()
    finally:
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    if not detached:
        state.err_console.print(f"\nConsole closed: {session.close_reason}")
        raise typer.Exit(1)
    if interactive:
        state.err_console.print(f"\nDetached from the console of VM {name}.")


EPILOG = (
    "Examples:\n"
    "  virtplane console web-1                      # Ctrl-] detaches\n"
    "  printf 'hostname\\n' | virtplane console web-1  # line by line, for scripts\n"
    "  virtplane console web-1 --takeover           # admin: someone left it attached"
)


def register(app: typer.Typer) -> None:
    app.command(epilog=EPILOG)(console)


__all__ = ["console_url", "open_websocket", "register", "vm_websocket_url"]
