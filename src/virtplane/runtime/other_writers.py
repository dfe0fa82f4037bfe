"""Wakes this process's watchers for commits other processes made (split roles, ``--workers``).

A local commit wakes the change feed and every watch stream at once (the store's listeners);
another process's commit was found only by their own polls, once a second. With the API apart
from the controllers, every write a client waits for crosses processes (an operation the API
wrote, reconciled by the controllers' process; its status, watched through an API worker), so
a second on each crossing is too slow.

This reads the store's revision every ``interval_s`` (one indexed ``max()``, shared by every
watcher of the process) and announces one that moved past what this process has heard of, as
a local commit would be. The same on SQLite and PostgreSQL: a short poll of one number costs
less than a LISTEN connection per process, works on both, and bounds the delay just as well at
the default 50 ms (docs/deployment.md, "Roles and workers").
"""

from __future__ import annotations

import asyncio
import logging

from virtplane.store.store import Store

log = logging.getLogger("virtplane.other_writers")

DEFAULT_INTERVAL_S = 0.05


class OtherWriters:
    def __init__(self, store: Store, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._store = store
        self.interval_s = interval_s
        self.heard = 0
        """The highest revision this process committed or announced."""
        self.polls = 0
        """How many times the revision was read (the first read takes what was there)."""

    def _local(self, revision: int) -> None:
        self.heard = max(self.heard, revision)

    async def run(self) -> None:
        """Poll and announce, until cancelled."""
        self._store.add_listener(self._local)
        try:
            self.heard = max(self.heard, await asyncio.to_thread(self._store.revision))
            self.polls += 1
            while True:
                await asyncio.sleep(self.interval_s)
                try:
                    revision = await asyncio.to_thread(self._store.revision)
                except Exception as error:  # the store is away for a moment: the next poll
                    log.debug("could not read the revision: %s", error)
                    continue
                self.polls += 1
                if revision > self.heard:
                    self.heard = revision
                    self._store.announce(revision)
        finally:
            self._store.remove_listener(self._local)
