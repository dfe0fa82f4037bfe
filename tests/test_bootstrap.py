from __future__ import annotations

import pytest

from virtplane.bootstrap import CONFLICT_REQUEUE_S, requeue_on_conflict
from virtplane.reconcile import Request, Result
from virtplane.store.errors import Conflict


async def test_a_lost_write_race_is_a_quick_quiet_requeue(caplog: pytest.LogCaptureFixture) -> None:
    async def loses(_: Request) -> Result | None:
        raise Conflict("VirtualMachine", "a", 1, 2)

    result = await requeue_on_conflict(loses)(Request("VirtualMachine", "a"))
    assert result == Result(requeue_after=CONFLICT_REQUEUE_S)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


async def test_other_errors_still_go_to_the_backoff() -> None:
    async def breaks(_: Request) -> Result | None:
        raise RuntimeError("driver exploded")

    with pytest.raises(RuntimeError):
        await requeue_on_conflict(breaks)(Request("VirtualMachine", "a"))
