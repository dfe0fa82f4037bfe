"""Calling into an asyncio loop from any thread (store listeners and libvirt's event thread)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVarTuple, Unpack

Args = TypeVarTuple("Args")


def call_on_loop(
    loop: asyncio.AbstractEventLoop | None, fn: Callable[[Unpack[Args]], object], *args: *Args
) -> None:
    """Run ``fn(*args)`` on ``loop``: now when called on it, else soon from its own thread.

    A loop that is gone or closing drops the call: what it would have woken is gone too.
    """
    if loop is None or loop.is_closed():
        return
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn(*args)
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(fn, *args)
