"""Retention: the change feed and the events are pruned by age and by count, dead tokens (expired
or revoked, as every login's token ends) by age, and SQLite hands
the emptied pages back to the file system, so that the database stops growing.

The process that reconciles (the only one on SQLite, the leader on PostgreSQL) prunes every
``every_s``, with the limits of the settings ``store.changes.*`` and ``events.*``, in short
transactions (``Store.prune_changes``, ``Store.prune_events``): the one writer SQLite has
waits a batch at most. Ages are counted with the store's clock.

SQLite needs ``auto_vacuum=INCREMENTAL`` to give pages back (``Store.reclaim_space``): a new
database has it, one made before retention gets it by one full VACUUM at start
(``vacuum_once_at_start``). PostgreSQL needs nothing: its autovacuum reuses deleted rows' space.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from virtplane.store.settings import Settings
from virtplane.store.store import Store

log = logging.getLogger("virtplane.retention")


@dataclass(frozen=True)
class Limits:
    changes_max_age_s: float
    changes_max_rows: int
    events_max_age_s: float
    events_max_rows: int
    tokens_dead_for_s: float = 30 * 86400

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.get_int("store.changes.retention_s"),
            settings.get_int("store.changes.max_rows"),
            settings.get_int("events.retention_s"),
            settings.get_int("events.max_rows"),
            settings.get_int("tokens.dead_retention_s"),
        )


@dataclass(frozen=True)
class Pruned:
    changes: int
    events: int
    pages: int
    """Pages SQLite handed back to the file system."""
    tokens: int = 0


def prune(store: Store, limits: Limits, keep_after: int | None = None) -> Pruned:
    """One pruning pass; ``keep_after``: no change after this revision goes (a local reader's)."""
    changes = store.prune_changes(
        max_age_s=limits.changes_max_age_s, max_rows=limits.changes_max_rows, keep_after=keep_after
    )
    events = store.prune_events(max_age_s=limits.events_max_age_s, max_rows=limits.events_max_rows)
    tokens = store.prune_tokens(dead_for_s=limits.tokens_dead_for_s)
    return Pruned(changes, events, store.reclaim_space() if changes or events or tokens else 0, tokens)


class Retention:
    """The periodic pruning of one control plane (``ControlPlane._lead`` runs ``run``)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        every_s: float = 60.0,
        keep_after: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.every_s = every_s
        self._keep_after = keep_after

    def prune_once(self, limits: Limits | None = None) -> Pruned:
        """One pass, with ``limits`` or the settings' (any thread)."""
        keep_after = self._keep_after() if self._keep_after is not None else None
        pruned = prune(self.store, limits or Limits.of(self.settings), keep_after)
        if pruned.changes or pruned.events or pruned.tokens:
            log.debug(
                "retention: dropped %d changes, %d events and %d dead tokens, %d pages freed",
                pruned.changes,
                pruned.events,
                pruned.tokens,
                pruned.pages,
            )
        return pruned

    async def run(self) -> None:
        """Prune now, then every ``every_s``, until cancelled (a failed pass is logged and retried)."""
        while True:
            try:
                # the settings read here: their cache belongs to the event loop's thread
                await asyncio.to_thread(self.prune_once, Limits.of(self.settings))
            except Exception:
                log.warning("retention: pruning failed; trying again in %g s", self.every_s, exc_info=True)
            await asyncio.sleep(self.every_s)


def vacuum_once_at_start(store: Store, settings: Settings) -> bool:
    """SQLite made before retention: prune, then the one full VACUUM that turns incremental
    auto-vacuum on (it rewrites the file: done before serving, logged); True if it ran. One that
    fails is logged and the server starts anyway: pruning bounds the file without it."""
    if not store.is_sqlite or store.uses_incremental_vacuum():
        return False
    started, before = time.monotonic(), store.size_bytes()
    log.info(
        "the database predates retention: pruning it, then one full VACUUM to turn on "
        "incremental auto-vacuum (once; %.1f MiB)...",
        before / 2**20,
    )
    try:
        pruned = prune(store, Limits.of(settings))
        store.use_incremental_vacuum()
    except DBAPIError as exc:  # a full disk (VACUUM writes a copy), a lock held elsewhere
        log.warning(
            "could not prune and VACUUM (%s): the database keeps its size and reuses the pages "
            "pruning frees; it is tried again at the next start",
            exc.orig or exc,
        )
        return False
    log.info(
        "VACUUM done in %.1f s: dropped %d old changes and %d old events, %.1f MiB -> %.1f MiB",
        time.monotonic() - started,
        pruned.changes,
        pruned.events,
        before / 2**20,
        store.size_bytes() / 2**20,
    )
    return True
