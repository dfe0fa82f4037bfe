"""Where ``virtplane login`` keeps its session tokens: ``$XDG_CONFIG_HOME/virtplane/credentials.json``
(``~/.config/...``), one per server URL, private to the user (0600 in a 0700 directory, from the
first byte). A command without ``--token`` or ``VIRTPLANE_TOKEN`` uses the token kept for its URL.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from virtplane.runtime.private import write_private

__all__ = ["credentials_path", "forget_token", "save_token", "saved_token"]


def credentials_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "virtplane" / "credentials.json"


def _key(url: str) -> str:
    return url.rstrip("/")


def _read() -> dict[str, Any]:
    try:
        document = json.loads(credentials_path().read_text())
    except (OSError, ValueError):  # none yet, or not ours to read: as if nobody logged in
        return {}
    return document if isinstance(document, dict) else {}


def saved_token(url: str) -> str | None:
    """The session token ``virtplane login`` kept for ``url``, if any."""
    entry = _read().get(_key(url))
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) and token else None


def save_token(url: str, token: str, **about: Any) -> Path:
    """Keep ``token`` (and what ``about`` says of it: owner, expiry) for ``url``; the file's path."""
    path = credentials_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    document = _read()
    document[_key(url)] = {"token": token, **about}
    write_private(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


def forget_token(url: str) -> bool:
    """Forget the token kept for ``url``; whether there was one."""
    document = _read()
    if document.pop(_key(url), None) is None:
        return False
    with contextlib.suppress(FileNotFoundError):
        write_private(credentials_path(), json.dumps(document, indent=2, sort_keys=True) + "\n")
    return True
