"""The ``virtplane`` command line (Typer + Rich), a client of the server's HTTP API."""

import sys
import types


def _httpx_without_its_command_line() -> None:
    """``import httpx`` imports httpx's own command line (``httpx._main``: click, rich.progress,
    pygments) whenever those are installed, as they are here: 0.2 s of every command's start-up
    (issue 39), for a tool this CLI never runs (upstream made it lazy later: pydantic/httpx2#947).
    A stand-in takes its place before httpx is imported; its ``main`` loads the real one."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stand_in = types.ModuleType("httpx._main", "stands in for httpx's command line (virtplane.cli)")

    def main() -> None:
        del sys.modules["httpx._main"]
        from httpx._main import main as real_main

        real_main()

    stand_in.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stand_in


_httpx_without_its_command_line()
