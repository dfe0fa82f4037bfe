"""A token's last use, written cheaply: at most once a minute per token, off the event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from datetime import datetime

from virtplane.store.database import utcnow
from virtplane.store.store import Store

log = logging.getLogger(__name__)

WRITE_EVERY_S = 60.0


class LastUse:
    """Notes each use of a token; writes ``last_used_at`` when the last write is a minute old.

    Known tokens only (a refused token is never noted), so it holds one entry per real token.
    The write runs in a worker thread: the request that triggers it does not wait for it.
    """

    def __init__(self, store: Store, *, every_s: float = WRITE_EVERY_S) -> None:
        self._store = store
        self._every_s = every_s
        self._written: dict[str, float] = {}
        self._pending: set[asyncio.Future[None] | Future[None]] = set()

    def note(self, name: str) -> None:
        now = time.monotonic()
        if now - self._written.get(name, float("-inf")) < self._every_s:
            return
        self._written[name] = now
        at = utcnow()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write(name, at)
            return
        future = loop.run_in_executor(None, self._write, name, at)
        self._pending.add(future)  # held until done: a task nobody references may be collected
        future.add_done_callback(self._pending.discard)

    def _write(self, name: str, at: datetime) -> None:
        try:
            self._store.token_used(name, at)
        except Exception:  # a lost last-use time is not worth failing a request for
            log.warning("could not record the last use of token %s", name, exc_info=True)
