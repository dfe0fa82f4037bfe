"""What every command gets: the server URL and token, a lazily built client, consoles, a clock.

Tests inject a transport and a fake clock by passing ``obj=CliOverrides(...)`` to
``CliRunner.invoke``; the root callback picks it up.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import typer
from rich.console import Console

from virtplane.cli.output import make_console
from virtplane.cli.tls import CertificateNotTrusted, client_context

if TYPE_CHECKING:  # httpx loads with the first request, not with --help (issue 39)
    import httpx

    from virtplane.cli.client import ApiClient

__all__ = ["CliOverrides", "CliState", "Clock", "SystemClock", "checked_url", "state_of"]


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class CliOverrides:
    """Replacements for the network and the clock, for tests and embedding."""

    transport: httpx.BaseTransport | None = None
    clock: Clock | None = None
    browser: Callable[[str], object] | None = None
    """Opens a URL for the user (``login --oidc``); the system's web browser by default."""


@dataclass
class CliState:
    url: str
    token: str | None
    transport: httpx.BaseTransport | None = None
    browser: Callable[[str], object] | None = None
    clock: Clock = field(default_factory=SystemClock)
    ca_file: Path | None = None
    tls_fingerprint: str | None = None
    """64 hex digits (``tls.normalize_fingerprint``)."""
    console: Console = field(default_factory=make_console)
    err_console: Console = field(default_factory=lambda: make_console(stderr=True))
    _client: ApiClient | None = None

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            from virtplane.cli.client import ApiClient

            self._client = ApiClient(self.url, self.token, transport=self.transport, verify=self.tls())
        return self._client

    def tls(self) -> ssl.SSLContext:
        """How the server's certificate is verified (the console uses it too)."""
        if self.tls_fingerprint is not None and not self.url.lower().startswith("https://"):
            # the user asked for a verified server; a plain URL would send the token unverified
            raise CertificateNotTrusted(
                f"a TLS fingerprint is pinned but {self.url} is not https://: nothing would be "
                "verified. Use the https:// URL, or unset --tls-fingerprint/VIRTPLANE_TLS_FINGERPRINT.",
            )
        if not self.url.lower().startswith("https://"):
            # Plain HTTP verifies nothing; loading the system's CAs would cost every command
            # 35 ms (issue 39). A context that trusts no CA refuses any TLS it might meet.
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return client_context(self.ca_file, self.tls_fingerprint)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def state_of(ctx: typer.Context) -> CliState:
    """The ``CliState`` the root callback stored on the context."""
    state = ctx.find_object(CliState)
    if state is None:  # a sub-app invoked on its own, e.g. in a test
        state = CliState(url="http://127.0.0.1:8470", token=None)
        ctx.obj = state
        ctx.call_on_close(state.close)
    return state


def checked_url(url: str) -> str:
    """``--url``'s check: an http:// or https:// URL with a host, else a usage error (exit 2),
    not a server that seems down (``localhost:8470`` would parse as the scheme "localhost")."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise typer.BadParameter(f"{url!r} is not an http:// or https:// URL, e.g. http://127.0.0.1:8470")
    return url
