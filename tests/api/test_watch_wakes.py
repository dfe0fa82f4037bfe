"""A watch stream reads again only for a commit its last read has not covered.

A local commit wakes the stream through a store listener. A commit that lands while a read
is running, before the read looks at the store's revision, is shown by that read, and its
wake-up arrives after: reading again for it finds nothing local, only whatever another
replica is writing at that moment, half done (a compaction race seen in CI). The stream's
own deadline ends each case, so the count of reads is exact whatever the timing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from virtplane.api.watch import Streams, WatchOptions, _follow, _Read, event_stream
from virtplane.domain.resources import Metadata, Secret, SecretSpec
from virtplane.store.store import Store


def secret(name: str) -> Secret:
    return Secret(metadata=Metadata(name=name), spec=SecretSpec(username="u", password="p"))


@pytest.mark.parametrize(
    ("commit", "reads"),
    [
        ("before-the-read-looks", 2),  # the first read covers it: only the deadline's read follows
        ("after-the-read-looked", 3),  # not covered: read for it, then the deadline's read
    ],
)
async def test_a_stream_reads_again_only_for_a_commit_it_has_not_shown(
    store: Store, commit: str, reads: int
) -> None:
    covered: list[int] = []

    def read(after: int) -> _Read:
        first = not covered
        if first and commit == "before-the-read-looks":
            store.create(secret(commit))  # its wake-up comes after this read
        top = store.revision()
        covered.append(top)
        if first and commit == "after-the-read-looked":
            store.create(secret(commit))
        return _Read([], top, top)

    options = WatchOptions(heartbeat_s=3600, poll_s=3600)
    stream = _follow("Secret", store.revision(), read, store, Streams(), options, timeout_s=0.5)
    lines = [line async for line in stream]
    assert len(lines) == 2  # the bookmark at the start, and the one at the deadline
    assert len(covered) == reads, covered
    assert covered[-1] == store.revision()


async def test_idle_streams_share_one_revision_probe_instead_of_reading_at_each_poll(store: Store) -> None:
    """Twenty idle streams polling every 20 ms for half a second: each reads at its start and
    at its deadline only; between, the polls ask the shared probe, whose revision has not moved."""
    reads = [0] * 20
    revisions = 0
    revision = store.revision

    def counted_revision() -> int:
        nonlocal revisions
        revisions += 1
        return revision()

    store.revision = counted_revision  # type: ignore[method-assign]

    def reader(index: int) -> Any:
        def read(after: int) -> _Read:
            reads[index] += 1
            top = revision()
            return _Read([], top, top)

        return read

    streams = Streams()
    options = WatchOptions(heartbeat_s=3600, poll_s=0.02)

    async def follow(index: int) -> None:
        start = revision()
        async for _ in _follow("Secret", start, reader(index), store, streams, options, timeout_s=0.5):
            pass

    await asyncio.gather(*(follow(i) for i in range(20)))
    assert reads == [2] * 20
    assert revisions >= 1, "the polls asked the probe"


async def test_an_event_recorded_without_a_write_is_found_by_the_next_poll(store: Store) -> None:
    """Events draw no revision and wake nobody: only a poll finds one recorded on its own (as
    another replica's would be). The shared probe of event streams asks for the last event id."""
    stream = event_stream(
        store,
        since=0,
        kind=None,
        name=None,
        streams=Streams(),
        options=WatchOptions(heartbeat_s=3600, poll_s=0.02),
        timeout_s=60,
    )
    store.record_event("Host", "node-1", "Disconnected", "before the stream")
    assert b"BOOKMARK" in await anext(stream)
    assert b"Disconnected" in await anext(stream)  # its first read: polls come after it
    revision = store.revision()
    store.record_event("Host", "node-1", "Connected", "recorded on its own")
    assert store.revision() == revision, "no revision drawn: the probe of revisions would not see it"
    line = await asyncio.wait_for(anext(stream), timeout=10)  # the deadline is at 60 s
    assert b"Connected" in line
    await stream.aclose()
