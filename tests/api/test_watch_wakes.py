"""A watch stream reads again only for a commit its last read has not covered.

A local commit wakes the stream through a store listener. A commit that lands while a read
is running, before the read looks at the store's revision, is shown by that read, and its
wake-up arrives after: reading again for it finds nothing local, only whatever another
replica is writing at that moment, half done (a compaction race seen in CI). The stream's
own deadline ends each case, so the count of reads is exact whatever the timing.
"""

from __future__ import annotations

import pytest

from virtplane.api.watch import Streams, WatchOptions, _follow, _Read
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
