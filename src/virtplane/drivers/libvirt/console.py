"""A domain's serial console through libvirt: ``virDomainOpenConsole`` on a non-blocking
``virStream``, for local and remote URIs alike (the stream rides on the libvirt connection).

Reading is driven by libvirt's event loop thread (``events.ensure_event_loop``): its stream
callback receives what is there and hands it to the asyncio loop, so nothing waits on the
loop. Writes and the close run in the driver's executor. libvirt refuses a second session
on a console (without VIR_DOMAIN_CONSOLE_FORCE) with VIR_ERR_OPERATION_FAILED: that is
``ConsoleBusy``. The stream hangs up when the guest's process ends (stop, crash, migration
away): ``read`` then returns b"".
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import Executor
from typing import Any

from virtplane.drivers.errors import ConsoleBusy, NotRunning, TransientError
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.loops import call_on_loop

CHUNK = 64 * 1024
SEND_RETRY_S = 0.01  # a full non-blocking stream is retried this often ...
SEND_TIMEOUT_S = 10.0  # ... until this long has passed


class LibvirtConsole:
    """One open console (a ``ConsoleStream``); made by ``open_console``."""

    def __init__(self, stream: Any, loop: asyncio.AbstractEventLoop, executor: Executor) -> None:
        self._stream = stream
        self._loop = loop
        self._executor = executor
        self._output: asyncio.Queue[bytes] = asyncio.Queue()
        self._lock = threading.Lock()
        self._ended = False

    # -- libvirt's event loop thread

    def on_event(self, stream: Any, events: int, _opaque: object) -> None:
        lv = _libvirt.load()
        if events & lv.VIR_STREAM_EVENT_READABLE:
            while True:
                try:
                    data = stream.recv(CHUNK)
                except lv.libvirtError:
                    self._end()
                    return
                if data == -2:  # nothing more for now
                    break
                if not data:  # end of stream: the guest's console is gone
                    self._end()
                    return
                call_on_loop(self._loop, self._output.put_nowait, bytes(data))
        if events & (lv.VIR_STREAM_EVENT_ERROR | lv.VIR_STREAM_EVENT_HANGUP):
            self._end()

    def _end(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        with contextlib.suppress(Exception):
            self._stream.eventRemoveCallback()
        call_on_loop(self._loop, self._output.put_nowait, b"")  # a closed loop: nobody reads any more

    # -- the asyncio side

    async def read(self) -> bytes:
        data = await self._output.get()
        if not data:
            self._output.put_nowait(b"")
        return data

    async def write(self, data: bytes) -> None:
        if not self._ended:
            await self._loop.run_in_executor(self._executor, self._send_all, data)

    async def close(self) -> None:
        await self._loop.run_in_executor(self._executor, self._close)

    def _send_all(self, data: bytes) -> None:
        lv = _libvirt.load()
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while data and not self._ended:
            try:
                sent = self._stream.send(data)
            except lv.libvirtError:
                self._end()
                return
            if sent == -2:  # the stream's buffer is full: the guest reads slowly
                if time.monotonic() > deadline:
                    raise TransientError("the guest's console does not take input")
                time.sleep(SEND_RETRY_S)
                continue
            data = data[sent:]

    def _close(self) -> None:
        self._end()
        with contextlib.suppress(Exception):  # a stream that hung up (or a second close) may refuse
            self._stream.abort()  # frees the console for the next session at once


def open_console(
    conn: Any, dom: LibvirtDomain, loop: asyncio.AbstractEventLoop, executor: Executor
) -> LibvirtConsole:
    """Attach to ``dom``'s first console (blocking: run it in the executor)."""
    lv = _libvirt.load()
    if not dom.is_active():
        raise NotRunning(f"domain {dom.name} is not running: a console needs a live guest")
    stream = conn.newStream(lv.VIR_STREAM_NONBLOCK)
    try:
        dom.open_console(stream)
    except lv.libvirtError as exc:
        with contextlib.suppress(Exception):
            stream.abort()
        if _libvirt.error_code(exc) == lv.VIR_ERR_OPERATION_FAILED and dom.is_active():
            raise ConsoleBusy(f"the console of {dom.name} is in use by another session") from exc
        if _libvirt.error_code(exc) == lv.VIR_ERR_OPERATION_INVALID:
            raise NotRunning(f"domain {dom.name} is not running: a console needs a live guest") from exc
        raise
    console = LibvirtConsole(stream, loop, executor)
    events = lv.VIR_STREAM_EVENT_READABLE | lv.VIR_STREAM_EVENT_ERROR | lv.VIR_STREAM_EVENT_HANGUP
    stream.eventAddCallback(events, console.on_event, None)
    return console


__all__ = ["LibvirtConsole", "open_console"]
