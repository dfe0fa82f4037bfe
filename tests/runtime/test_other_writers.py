"""``OtherWriters``: a commit another process made wakes this process's listeners (the change
feed, every watch stream) as a local commit does, without a local commit to announce it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.conftest import eventually
from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec
from virtplane.runtime.other_writers import OtherWriters
from virtplane.store.store import Store, sqlite_url


async def test_another_processes_commit_is_announced_once_and_a_local_one_not_again(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "shared.db")
    here, elsewhere = Store(url), Store(url)  # two processes' stores: neither hears the other's commits
    here.migrate()
    heard: list[int] = []
    here.add_listener(heard.append)
    others = OtherWriters(here, interval_s=0.01)
    task = asyncio.create_task(others.run())
    try:
        await eventually(lambda: others.polls > 0)  # what was there before is not announced
        elsewhere.create(VirtualMachine(metadata=Metadata(name="theirs"), spec=VirtualMachineSpec()))
        theirs = elsewhere.revision()
        await eventually(lambda: theirs in heard)
        here.create(VirtualMachine(metadata=Metadata(name="ours"), spec=VirtualMachineSpec()))
        ours = here.revision()
        polled = others.polls
        await eventually(lambda: others.polls > polled + 1)  # polls that found ours: not announced again
        elsewhere.create(VirtualMachine(metadata=Metadata(name="after"), spec=VirtualMachineSpec()))
        after = elsewhere.revision()
        await eventually(lambda: after in heard)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        here.close()
        elsewhere.close()
    assert heard == [theirs, ours, after], "each once: ours by the commit, theirs by the poll"
