"""What the CLI reports to its user: one exception per kind of failure, each read as
``Error (reason): message`` with the exit code ``exit_codes`` gives it.

Kept apart from the HTTP client (``client``) so that a command which never talks to the
server, ``--help`` first, does not import httpx (issue 39: start-up under 0.3 s).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "CliError",
    "JsonObject",
    "ServerUnreachable",
    "WaitTimedOut",
    "WatchExpired",
]

DEFAULT_URL = "http://127.0.0.1:8470"

JsonObject = dict[str, Any]


class CliError(Exception):
    """A failure to report to the user as ``Error (reason): message``; its exit code is in
    ``exit_codes.exit_code_for``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ApiError(CliError):
    """The server refused or failed a request."""

    def __init__(self, status_code: int, reason: str, message: str, fields: list[str] | None = None) -> None:
        super().__init__(reason, message)
        self.status_code = status_code
        self.fields = fields or []
        """The fields at fault the server named (``spec.memory``), if any."""


class WatchExpired(CliError):
    """The server no longer has the changes after the revision a watch asked for (410)."""


class ServerUnreachable(CliError):
    """No server answered at the URL."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(
            "ServerUnreachable",
            f"the virtplane server is not reachable at {url} ({detail}). "
            "Start one with `virtplane serve --demo`, or point the CLI at yours with "
            "--url or VIRTPLANE_URL.",
        )
        self.url = url


class WaitTimedOut(CliError):
    """``--wait`` gave up; the work it followed goes on in the server."""

    def __init__(self, message: str) -> None:
        super().__init__("Timeout", message)
