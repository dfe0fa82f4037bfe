"""Files nobody but the service reads, whatever the umask it was started with.

The data directory holds the database (BMC credentials, tokens' hashes), the admin token
and the simulated hosts' state. Each is created private (a mode given to ``open`` or
``mkdir``, or a umask of 077 while something else creates it), never made private by a
chmod after it was written: between the two, anyone could open it and keep the handle.
SQLite gives a database's WAL and SHM files the mode of the database file itself.

``private_umask`` is process-wide: it is used only while the server starts, before any
other thread runs (and it is not left on: files the hypervisor reads, such as seed images,
keep the usual modes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Everything created inside is private to the service's user (umask 077)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner may enter: made 0700, or an existing one narrowed to it
    (a data directory an older release made 0755)."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    narrow(path, PRIVATE_DIR)
    return path


def narrow(path: Path, mode: int) -> None:
    """Take away what ``mode`` does not allow from an existing file (made by an older release, or a
    directory made by hand). Logged at debug only: a refusal to start stays one line."""
    current = stat.S_IMODE(path.stat().st_mode)
    if current & ~mode:
        os.chmod(path, current & mode)
        log.debug("%s was mode %o, open to others; now %o", path, current, current & mode)


def create_private(path: Path) -> None:
    """Create ``path`` empty and 0600 if it is not there yet (an existing one is narrowed to 0600)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE))
    except FileExistsError:
        narrow(path, PRIVATE_FILE)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, private from its first byte: written to a new 0600 file beside
    it, synced, then renamed over it (a reader sees the old file or the new one, never a part)."""
    temporary = path.with_name(f".{path.name}.new")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


__all__ = ["create_private", "narrow", "private_dir", "private_umask", "write_private"]
