"""One server per data directory: an exclusive lock held for the life of the process.

The data directory holds the SQLite store, the admin token and the simulated hosts'
state (``sim.db``). Two servers on one directory would run two sets of controllers
side by side over the same VMs, which can start one VM on two hosts. So ``serve``
takes this lock before it reads or writes anything there, and a second server exits
at once, naming the process that holds it.

The lock is ``flock`` on ``DIR/virtplane.lock``: the kernel drops it when the process
dies, SIGKILL included, so a crashed server never leaves a stale lock behind. The pid
written into the file is only for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = "virtplane.lock"


class DataDirBusy(Exception):
    """Another process holds the directory."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"another virtplane ({who}) is serving {directory}")
        self.directory = directory
        self.pid = pid


class DataDirLock:
    """``acquire`` takes the lock or raises ``DataDirBusy``; ``release`` (or process exit) frees it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> DataDirLock:
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise DataDirBusy(self.directory, int(holder) if holder.isdigit() else None) from None
        except BaseException:
            handle.close()
            raise
        # one fixed-width write: a reader sees the old pid or the new one, never half of either
        os.pwrite(handle.fileno(), f"{os.getpid():>10}\n".encode(), 0)
        os.ftruncate(handle.fileno(), 11)
        self._file = handle
        return self

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


__all__ = ["LOCK_FILE", "DataDirBusy", "DataDirLock"]
