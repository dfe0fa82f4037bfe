"""Sources of "look at X again": here, the periodic resync that makes reconciles converge
even when events are missed or coalesced."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from virtplane.reconcile.types import Request

logger = logging.getLogger("virtplane.reconcile")


def resync_slices(keys: Iterable[Request], slices: int) -> list[list[Request]]:
    """Split ``keys`` into at most ``slices`` groups whose sizes differ by at most one.

    Keys are ordered by hash, so a key keeps roughly the same place in the period
    from one pass to the next (about one resync per period each) while the groups
    stay even.
    """
    ordered = sorted(set(keys), key=hash)
    if not ordered:
        return []
    count = min(slices, len(ordered))
    size, extra = divmod(len(ordered), count)
    groups: list[list[Request]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        groups.append(ordered[start:end])
        start = end
    return groups


async def resync_ticker(
    controller_keys: Callable[[], Iterable[Request]],
    enqueue: Callable[[Request], None],
    period_s: float,
    *,
    max_per_s: float | None = None,
    slices: int = 100,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Enqueue every key once per ``period_s``, spread over the period; runs until cancelled.

    Each pass lists the keys, splits them into ``slices`` even groups and enqueues
    one group every ``period_s / slices`` seconds, so 10,000 keys arrive as a steady
    trickle rather than a thundering herd. With ``max_per_s``, a pass over more keys
    than ``period_s x max_per_s`` takes longer instead: an idle fleet's resync costs at
    most that many reconciles a second, however large it grows. A failing listing is
    logged and retried next period.
    """
    if period_s <= 0:
        raise ValueError(f"period_s must be positive, got {period_s!r}")
    if max_per_s is not None and max_per_s <= 0:
        raise ValueError(f"max_per_s must be positive or None, got {max_per_s!r}")
    if slices < 1:
        raise ValueError(f"slices must be at least 1, got {slices}")
    while True:
        try:
            keys = set(controller_keys())
            groups = resync_slices(keys, slices)
        except Exception:
            logger.exception("resync could not list keys; trying again next period")
            groups = []
        if not groups:
            await sleep(period_s)
            continue
        this_pass_s = period_s if max_per_s is None else max(period_s, len(keys) / max_per_s)
        interval = this_pass_s / len(groups)
        for group in groups:
            for key in group:
                enqueue(key)
            await sleep(interval)


__all__ = ["resync_slices", "resync_ticker"]
