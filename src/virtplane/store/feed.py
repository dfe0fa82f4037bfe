"""The change feed: wakes async watchers when the store changes.

Local writes wake watchers at once through a store listener; a slow poll covers
writes made by other processes (several replicas on one PostgreSQL).

Remembering only the highest revision delivered is safe because the store makes
revisions visible in the order it hands them out (on PostgreSQL writers draw and
commit them under one advisory lock; see ``virtplane.store.database``): no revision
below one a reader has seen can commit later.

Retention prunes old changes. The process that prunes never drops one its own feed has not
read; another replica's feed that fell further behind (a process paused for longer than
``store.changes.retention_s``) finds the horizon past its revision and calls ``resync``
(the cache reads every object again) instead of going on with changes missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from virtplane.loops import call_on_loop
from virtplane.store.changes import Change
from virtplane.store.store import Store

log = logging.getLogger("virtplane.store.feed")

ChangeHandler = Callable[[list[Change]], None]


class ChangeFeed:
    def __init__(
        self,
        store: Store,
        *,
        poll_interval_s: float = 1.0,
        batch: int = 5000,
        resync: Callable[[], int] | None = None,
    ) -> None:
        self._store = store
        self._resync = resync
        self._poll_interval_s = poll_interval_s
        self._batch = batch
        self._handlers: list[ChangeHandler] = []
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.revision = 0

    def subscribe(self, handler: ChangeHandler) -> None:
        self._handlers.append(handler)

    def _on_commit(self, _revision: int) -> None:
        call_on_loop(self._loop, self._wake.set)

    async def run(self, from_revision: int | None = None) -> None:
        """Deliver every change after ``from_revision`` (default: now) to the handlers, forever."""
        self._loop = asyncio.get_running_loop()
        self._store.add_listener(self._on_commit)
        self.revision = self._store.revision() if from_revision is None else from_revision
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll_interval_s)
                self._wake.clear()
                self.pump()
        finally:
            self._store.remove_listener(self._on_commit)

    async def catch_up(self) -> None:
        """Deliver now everything the store has committed so far, without waiting for a wake-up.

        A reader that must not answer from a stale copy (the API's admission checks, a plan
        asked from a follower replica whose copy follows the leader by a poll) calls this
        first: everything any client could have read before this call is then delivered.
        """
        if self._loop is None:
            return  # not running: nothing to deliver to
        if self.revision < self._store.revision():
            self.pump()

    def pump(self) -> int:
        """Read and deliver what is new; returns how many changes were delivered."""
        delivered = 0
        while True:
            changes = self._store.changes_since(self.revision, self._batch)
            if (not changes or changes[0].revision != self.revision + 1) and self._expired():
                continue  # resynced: the changes after the revision it read
            if not changes:
                return delivered
            self.revision = changes[-1].revision
            delivered += len(changes)
            for handler in self._handlers:
                try:
                    handler(changes)
                except Exception:  # a broken watcher must not stop the others
                    log.exception("change handler failed")
            if len(changes) < self._batch:  # that was all: no query to be told so
                return delivered

    def _expired(self) -> bool:
        """Retention pruned changes this feed had not read (a gap in the revisions it reads may
        be only rolled-back writes); then ``resync``, and True."""
        horizon = self._store.compacted_revision()
        if self._resync is None or horizon <= self.revision:
            return False
        log.warning(
            "the change feed fell behind retention (read up to %d, changes up to %d pruned): "
            "reading every object again",
            self.revision,
            horizon,
        )
        self.revision = self._resync()
        return True
