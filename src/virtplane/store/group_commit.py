"""The controllers' status writes, committed together.

Every reconcile that writes awaits its write; the first one queued schedules a commit
for the event loop's next turn, and the writes queued by then (the other reconciles
that reached a write meanwhile) go into that one transaction (``Store.write_each``).
On SQLite a transaction's BEGIN, COMMIT and bookkeeping cost as much as one status
write itself: eight writes in one commit take about two thirds of the time each
(``bench/``).

Nothing waits on a timer: a write alone is committed on the loop's next turn. When a
write's await returns, its outcome is final and durable, as a plain write's (intent is
durable before any destructive step). A lost race is that writer's own outcome and
takes nothing of the others'. A writer cancelled before the commit (a reconcile that
timed out) is left out of it: as if it had stopped before its write.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import NamedTuple

from virtplane.domain.resources import Resource
from virtplane.store.store import Store
from virtplane.store.writes import StatusWrite


class GroupCommit:
    """Status writes from the event loop's coroutines, one transaction per turn of the loop."""

    def __init__(self, store: Store, committed: Callable[[Resource], None]) -> None:
        """``committed`` sees each object written, as stored, in its writer's context (which
        reconcile wrote it), before the writer resumes and before the change feed can deliver
        the change: the cache takes the controllers' writes so, and a controller is not woken
        by what it wrote itself."""
        self._store = store
        self._committed = committed
        self._queued: list[_Queued] = []

    async def write(self, write: StatusWrite) -> list[Resource]:
        """The objects as stored, once committed; the write's ``StoreError`` if it lost."""
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[list[Resource]] = loop.create_future()
        self._queued.append(_Queued(write, outcome, contextvars.copy_context()))
        if len(self._queued) == 1:
            loop.call_soon(self._commit)
        return await outcome

    def _commit(self) -> None:
        queued, self._queued = [q for q in self._queued if not q.outcome.cancelled()], []
        if not queued:
            return
        try:
            outcomes = self._store.write_each([q.write for q in queued])
        except Exception as error:  # nothing of the transaction was stored: each writer sees why
            for q in queued:
                q.outcome.set_exception(error)
            return
        for q, outcome in zip(queued, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                q.outcome.set_exception(outcome)
                continue
            for obj in outcome:
                q.context.run(self._committed, obj)
            q.outcome.set_result(outcome)


class _Queued(NamedTuple):
    write: StatusWrite
    outcome: asyncio.Future[list[Resource]]
    context: contextvars.Context


__all__ = ["GroupCommit"]
