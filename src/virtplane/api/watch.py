"""Watches: ``GET /v1/{kind}?watch=1&resource_version=N`` streams every change after revision N.

The answer is JSON lines (``application/x-ndjson``), one event per line, as Kubernetes
sends them::

    {"type": "ADDED" | "MODIFIED" | "DELETED", "object": {...}}
    {"type": "BOOKMARK", "object": {"kind": ..., "metadata": {"resource_version": N}}}
    {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": ...}}

A BOOKMARK comes first (the revision the stream starts from), whenever the stream was
quiet for ``heartbeat_s`` (it keeps proxies and clients from taking silence for a dead
server, and moves the client's revision past changes of other kinds), and last when the
stream ends (its timeout, or server shutdown). A client resumes after a disconnect with
the last revision it saw; one that fell behind compaction gets 410 Expired and lists again.

Objects are sent as they are when the change is read, not as they were at the revision
of the change (the store keeps no old bodies): several quick writes to one object may
arrive as one event with the newest state, never one older than the change. A DELETED
object has only kind, name and the revision of the deletion.

With a selector, changes to objects that do not match are left out, and an object this
stream sent that no longer matches is sent as DELETED. A deleted object can no longer be
matched, so its deletion is sent unless this stream saw it not matching: a client that
listed first may hold it (clients ignore deletions of objects they do not have).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from anyio import to_thread
from fastapi.responses import StreamingResponse

from virtplane.api.errors import ApiError
from virtplane.api.shown import public_json
from virtplane.domain.resources import API_VERSION, Resource
from virtplane.domain.selectors import Selector
from virtplane.store.changes import Change
from virtplane.store.lists import current_objects, events_after, kind_changes, last_event_id
from virtplane.store.store import Store

__all__ = ["Streams", "WatchOptions", "event_stream", "object_stream", "require_resumable", "stream_response"]

MEDIA_TYPE = "application/x-ndjson"


@dataclass
class WatchOptions:
    heartbeat_s: float = 10.0
    """A quiet stream sends a BOOKMARK this often."""
    poll_s: float = 1.0
    """How often a stream looks for writes it was not woken for (other replicas, events)."""
    batch: int = 500
    """Changes read per query."""


class SharedProbe:
    """A number (the store's revision, the last event's id) read once for all the idle
    streams that poll about the same time.

    An idle stream's poll (for other replicas' writes) used to be a read of its own: 500
    idle watches made 500 queries a second. Now a poll first asks a probe, and reads only if
    the number moved past what the stream has shown. A probe taken by another stream after
    this one's last read began is as good as its own; a write it missed by being taken a
    moment early is found at the next poll, or woken for at once if it is local.
    """

    def __init__(self) -> None:
        self._taken_at = -math.inf
        self._value = 0

    async def value(self, read: Callable[[], int], taken_after: float) -> int:
        if self._taken_at > taken_after:
            return self._value
        started = time.monotonic()
        value: int = await to_thread.run_sync(read)
        if started > self._taken_at:
            self._taken_at, self._value = started, value
        return value


@dataclass
class Streams:
    """The open streams of this server, so that shutdown can end them cleanly.

    uvicorn waits for open responses before it shuts the application down, and a watch
    never ends by itself; the server calls ``close`` first (``virtplane.server.ApiServer``).
    """

    _ending: dict[asyncio.Event, asyncio.AbstractEventLoop] = field(default_factory=dict)
    closed: bool = False
    revisions: SharedProbe = field(default_factory=SharedProbe)
    event_ids: SharedProbe = field(default_factory=SharedProbe)
    """Events draw no revision of their own: an event stream's polls ask for the last id."""

    def open(self) -> asyncio.Event:
        """An event that is set when the stream should end; call from the stream's loop."""
        ending = asyncio.Event()
        if self.closed:
            ending.set()
        self._ending[ending] = asyncio.get_running_loop()
        return ending

    def release(self, ending: asyncio.Event) -> None:
        self._ending.pop(ending, None)

    def end_all(self) -> None:
        """End every open stream (each with a last BOOKMARK); new ones may still open. Any thread."""
        for ending, loop in list(self._ending.items()):
            with contextlib.suppress(RuntimeError):  # its loop is closed: the stream is gone
                loop.call_soon_threadsafe(ending.set)

    def close(self) -> None:
        """End every stream, now and from now on: the server is shutting down."""
        self.closed = True
        self.end_all()

    def __len__(self) -> int:
        return len(self._ending)


def require_resumable(store: Store, revision: int) -> None:
    """410 Expired when changes after ``revision`` were compacted away."""
    compacted = store.compacted_revision()
    if revision < compacted:
        raise ApiError(
            410,
            "Expired",
            f"revision {revision} is too old: changes up to {compacted} were compacted; "
            "list again and watch from the list's metadata.resource_version",
        )


def _line(kind: str, obj: str) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj.encode() + b"}\n"


def bookmark(kind: str, revision: int) -> bytes:
    return _line("BOOKMARK", json.dumps({"kind": kind, "metadata": {"resource_version": revision}}))


def _tombstone(kind: str, name: str, revision: int) -> bytes:
    obj = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, "resource_version": revision}}
    return _line("DELETED", json.dumps(obj))


@dataclass
class _Read:
    lines: list[bytes]
    position: int
    covered: int  # the store revision whose changes this read has shown all of (unless ``more``)
    more: bool = False
    expired: bool = False


class _ObjectReader:
    """Turns the changes of one kind after a revision into event lines (runs in a worker thread)."""

    def __init__(
        self,
        store: Store,
        cls: type[Resource],
        labels: Selector,
        fields: Selector,
        batch: int,
        redacted: bool = False,
    ):
        self.store, self.cls, self.labels, self.fields, self.batch = store, cls, labels, fields, batch
        self.redacted = redacted  # as a viewer sees the objects (api/shown.py)
        self.sent: dict[str, int] = {}  # name -> resource_version last sent, while it may repeat
        self.matched: set[str] = set()  # names this stream sent as matching (for DELETED on leaving)
        self.unmatched: set[str] = set()  # names this stream saw not matching (no DELETED for them)
        self.selective = bool(labels or fields)

    def read(self, after: int) -> _Read:
        top = self.store.revision()
        changes = kind_changes(self.store, self.cls.KIND, after=after, upto=top, limit=self.batch)
        # The horizon is looked at after the read: pruning that ran meanwhile may have taken
        # changes this read should have had, and then the horizon is past ``after``.
        if after < self.store.compacted_revision():
            return _Read([], after, after, expired=True)
        more = len(changes) == self.batch
        position = changes[-1].revision if more else max(top, after)
        by_name: OrderedDict[str, list[Change]] = OrderedDict()
        for change in changes:
            by_name.setdefault(change.name, []).append(change)
            by_name.move_to_end(change.name)  # in the order of each name's last change
        current = current_objects(
            self.store, self.cls.KIND, list(by_name), labels=self.labels, fields=self.fields
        )
        lines: list[bytes] = []
        for name, group in by_name.items():
            lines.extend(self._events(name, group, current.get(name)))
        self.sent = {name: rv for name, rv in self.sent.items() if rv > position}
        return _Read(lines, position, top, more)

    def _events(self, name: str, group: list[Change], current: Any) -> list[bytes]:
        kind = self.cls.KIND
        deletions = [c for c in group if c.op == "deleted"]
        lines: list[bytes] = []
        if deletions:
            if name not in self.unmatched:
                lines.append(_tombstone(kind, name, deletions[-1].revision))
            self.matched.discard(name)
            self.unmatched.discard(name)
            self.sent.pop(name, None)
            if group[-1].op == "deleted":
                return lines
        if current is None:
            return lines  # deleted since the changes were read: that deletion comes next
        obj = self.cls.model_validate_json(current.body)
        version = obj.metadata.resource_version
        if version <= self.sent.get(name, 0):
            return lines  # this state was sent already, for an earlier change
        self.sent[name] = version
        if not current.matches:
            self.unmatched.add(name)
            if name in self.matched:
                self.matched.discard(name)
                lines.append(_tombstone(kind, name, version))
            return lines
        since_deletion = group[group.index(deletions[-1]) + 1 :] if deletions else group
        event = "ADDED" if any(c.op == "added" for c in since_deletion) else "MODIFIED"
        if self.selective:
            self.matched.add(name)
            self.unmatched.discard(name)
        lines.append(_line(event, public_json(obj, redacted=self.redacted)))  # a Secret without its password
        return lines


async def _follow(
    kind: str,
    start: int,
    read: Callable[[int], _Read],
    store: Store,
    streams: Streams,
    options: WatchOptions,
    timeout_s: float,
    events: bool = False,
) -> AsyncIterator[bytes]:
    """The stream: bookmark, then what ``read`` finds after each wake-up, until it should end."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    newest = 0  # the newest revision a local commit announced
    covered = 0  # the store revision the last read showed everything up to

    def heard(revision: int) -> None:
        nonlocal newest
        newest = max(newest, revision)
        wake.set()

    def on_commit(revision: int) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(heard, revision)

    ending = streams.open()
    store.add_listener(on_commit)
    deadline = time.monotonic() + timeout_s
    position = start
    try:
        yield bookmark(kind, position)
        quiet_since = time.monotonic()
        polled = False  # the last wait ended by the poll interval, not a commit nor the end
        read_started = 0.0
        while True:
            wake.clear()
            if not (polled and await _nothing_new(store, streams, events, read_started, covered, position)):
                read_started = time.monotonic()
                result = await to_thread.run_sync(read, position)
                if result.expired:
                    message = f"changes after {position} were compacted; list again"
                    yield _line("ERROR", json.dumps({"code": 410, "reason": "Expired", "message": message}))
                    return
                position, covered = result.position, result.covered
                if result.lines:
                    yield b"".join(result.lines)
                    quiet_since = time.monotonic()
                if result.more:
                    polled = False
                    continue
            now = time.monotonic()
            if ending.is_set() or now >= deadline:
                yield bookmark(kind, position)
                return
            if now - quiet_since >= options.heartbeat_s:
                yield bookmark(kind, position)
                quiet_since = now
            wait = min(options.poll_s, quiet_since + options.heartbeat_s - now, deadline - now)
            until = now + max(wait, 0.0)
            while True:
                await _first_of(wake, ending, timeout=until - time.monotonic())
                if not wake.is_set() or newest > covered or ending.is_set():
                    break
                # A commit the last read covered already (it landed while that read ran): reading
                # again for it would find nothing local, only another replica's writes half done.
                wake.clear()
            polled = not wake.is_set() and not ending.is_set() and time.monotonic() < deadline
    finally:
        store.remove_listener(on_commit)
        streams.release(ending)


async def _nothing_new(
    store: Store, streams: Streams, events: bool, read_started: float, covered: int, position: int
) -> bool:
    """Whether a poll would find nothing: the shared probe shows nothing past what was shown."""
    if events:
        return await streams.event_ids.value(lambda: last_event_id(store), read_started) <= position
    return await streams.revisions.value(store.revision, read_started) <= covered


async def _first_of(*events: asyncio.Event, timeout: float) -> None:
    """Until one of ``events`` is set, or ``timeout`` seconds."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def object_stream(
    store: Store,
    cls: type[Resource],
    *,
    since: int,
    labels: Selector,
    fields: Selector,
    streams: Streams,
    options: WatchOptions,
    timeout_s: float,
    redacted: bool = False,
) -> AsyncIterator[bytes]:
    reader = _ObjectReader(store, cls, labels, fields, options.batch, redacted)
    return _follow(cls.KIND, since, reader.read, store, streams, options, timeout_s)


def event_stream(
    store: Store,
    *,
    since: int,
    kind: str | None,
    name: str | None,
    streams: Streams,
    options: WatchOptions,
    timeout_s: float,
) -> AsyncIterator[bytes]:
    """New events after the event id ``since`` (events are numbered apart from revisions)."""

    def read(after: int) -> _Read:
        top = store.revision()  # first: an event commits with its revision, so all up to top are read
        events = events_after(store, after=after, limit=options.batch, kind=kind, name=name)
        lines = [_line("ADDED", event.model_dump_json()) for event in events]
        return _Read(lines, events[-1].id if events else after, top, more=len(events) == options.batch)

    return _follow("Event", since, read, store, streams, options, timeout_s, events=True)


def stream_response(stream: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        stream,
        media_type=MEDIA_TYPE,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
