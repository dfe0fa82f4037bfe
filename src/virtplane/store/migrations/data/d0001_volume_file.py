"""1: ``Volume.status.file`` of a volume an early release made.

Before the image library (51f3164) a volume's file was named after the Volume and its
status had no ``file``; the current code falls back to ``vp-<uid>``, a file that does not
exist, so a restore, a snapshot, a delete or a block migration of such a volume works on
nothing. The file is the last part of the path the old release recorded (``sim://POOL/NAME``
or ``DIR/NAME``). A body that has ``status.file``, even empty, was written by a release
that names files by uid: left alone. A volume the old release never created (no path)
is left to the current naming: there is no file of it to find.
"""

from __future__ import annotations

import posixpath
from typing import Any

from virtplane.store.migrations.data.base import DataMigration, Known

VERSION = 1


def upgrade(kind: str, body: dict[str, Any], known: Known) -> list[str]:
    del kind, known
    status = body.get("status")
    if not isinstance(status, dict) or "file" in status:
        return []
    path = status.get("path") or ""
    if not path:
        return []
    file = posixpath.basename(path.rstrip("/"))
    status["file"] = file
    return [f"status.file set to {file!r} (the file of its recorded path {path})"]


MIGRATION = DataMigration(VERSION, ("Volume",), upgrade)
