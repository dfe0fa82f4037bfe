"""The CLI's side of an OpenID Connect login: a one-shot HTTP listener on the loopback
interface (RFC 8252) that the provider sends the browser back to with the code and state."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

__all__ = ["LoopbackListener"]

_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>virtplane</title>"
    b"<p>virtplane: the login went back to the command line. You may close this window.</p>"
)


class LoopbackListener:
    """Listens on 127.0.0.1 and a free port for the one request of ``redirect_uri``; ``wait``
    gives its query (code and state, or the provider's error)."""

    PATH = "/callback"

    def __init__(self) -> None:
        self.query: dict[str, str] | None = None
        self._arrived = threading.Event()
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != LoopbackListener.PATH or listener._arrived.is_set():
                    self.send_error(404)
                    return
                listener.query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(_PAGE)))
                self.end_headers()
                self.wfile.write(_PAGE)
                listener._arrived.set()

            def log_message(self, format: str, *args: object) -> None:  # quiet: the CLI says what happens
                pass

        self._server = HTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.PATH}"

    def __enter__(self) -> LoopbackListener:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def wait(self, timeout_s: float) -> dict[str, str] | None:
        """The callback's query, or None if none came within ``timeout_s``."""
        return self.query if self._arrived.wait(timeout_s) else None
