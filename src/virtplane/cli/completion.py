"""Shell completion of resource names (``vm stop <TAB>``), asked of the server.

A shell asks again at every TAB; the names are kept for a few seconds in a cache file only
its user can read (``$XDG_CACHE_HOME/virtplane``), one per server, token and kind. A server
that does not answer, or refuses, completes nothing: completion never prints an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

import typer

from virtplane.cli.errors import DEFAULT_URL, CliError
from virtplane.cli.kinds import resolve_kind

__all__ = ["CACHE_SECONDS", "complete_host", "complete_name", "complete_vm", "resource_names"]

CACHE_SECONDS = 5.0
"""How long names are reused; ``VIRTPLANE_COMPLETION_CACHE_S`` overrides it (0: always ask)."""
REQUEST_TIMEOUT_S = 2.0
"""A TAB that waits longer than this for a server is worse than no completion."""


def complete_name(ctx: typer.Context, incomplete: str) -> list[str]:
    """The NAME after a KIND (``get vm <TAB>``, ``delete volume <TAB>``)."""
    kind = ctx.params.get("kind")
    try:
        info = resolve_kind(str(kind)) if kind else None
    except CliError:
        return []
    return _starting(resource_names(ctx, info.plural), incomplete) if info else []


def complete_vm(ctx: typer.Context, incomplete: str) -> list[str]:
    return _starting(resource_names(ctx, "vms"), incomplete)


def complete_host(ctx: typer.Context, incomplete: str) -> list[str]:
    return _starting(resource_names(ctx, "hosts"), incomplete)


def _starting(names: list[str], incomplete: str) -> list[str]:
    return [name for name in names if name.startswith(incomplete)]


def resource_names(ctx: typer.Context, plural: str) -> list[str]:
    """The names of every ``plural`` on the server the command line names, sorted."""
    root = ctx.find_root().params
    url = str(root.get("url") or os.environ.get("VIRTPLANE_URL") or DEFAULT_URL)
    token = root.get("token") or os.environ.get("VIRTPLANE_TOKEN") or None
    path = _cache_file(url, token, plural)
    cached = _read(path)
    if cached is not None:
        return cached
    from virtplane.cli.client import ApiClient  # httpx: only once a name is asked for (issue 39)

    try:
        with ApiClient(url, token, timeout_s=REQUEST_TIMEOUT_S) as client:
            items = client.list_items(plural)
    except CliError:
        return []
    names = sorted(str((item.get("metadata") or {}).get("name", "")) for item in items)
    _write(path, names)
    return names


def _cache_seconds() -> float:
    try:
        return float(os.environ.get("VIRTPLANE_COMPLETION_CACHE_S", CACHE_SECONDS))
    except ValueError:
        return CACHE_SECONDS


def _cache_file(url: str, token: str | None, plural: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "virtplane"
    # hashed: neither the token nor the server's address is written in a file name
    key = hashlib.sha256(f"{url}\0{token or ''}\0{plural}".encode()).hexdigest()[:24]
    return base / f"completion-{key}.json"


def _read(path: Path) -> list[str] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("names"), list):
        return None
    fresh = 0 <= time.time() - float(data.get("at", 0)) < _cache_seconds()
    return [str(name) for name in data["names"]] if fresh else None


def _write(path: Path, names: list[str]) -> None:
    """Atomically, readable by its user only; a cache that cannot be written is no cache."""
    import tempfile  # only when asking the server: a TAB served from the cache needs none of it

    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".completion-")  # mode 0600
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            json.dump({"at": time.time(), "names": names}, stream)
        os.replace(temporary, path)
