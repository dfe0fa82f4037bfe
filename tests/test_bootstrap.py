from __future__ import annotations

import pytest

from virtplane.bootstrap import CONFLICT_REQUEUE_S, one_reconcile
from virtplane.reconcile import Request, Result
from virtplane.store.errors import Conflict
from virtplane.store.store import Store


async def test_a_lost_write_race_is_a_quick_quiet_requeue(caplog: pytest.LogCaptureFixture) -> None:
    async def loses(_: Request) -> Result | None:
        raise Conflict("VirtualMachine", "a", 1, 2)

    result = await one_reconcile(loses)(Request("VirtualMachine", "a"))
    assert result == Result(requeue_after=CONFLICT_REQUEUE_S)
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


async def test_other_errors_still_go_to_the_backoff() -> None:
    async def breaks(_: Request) -> Result | None:
        raise RuntimeError("driver exploded")

    with pytest.raises(RuntimeError):
        await one_reconcile(breaks)(Request("VirtualMachine", "a"))


async def test_a_reconcile_writes_its_events_with_its_write_and_drops_them_when_it_loses_a_race(
    store: Store,
) -> None:
    from virtplane.bootstrap import ControlPlane
    from virtplane.domain.resources import Metadata, VirtualMachine, VirtualMachineSpec

    plane = ControlPlane(store)
    ctx = plane.ctx
    store.create(VirtualMachine(metadata=Metadata(name="a"), spec=VirtualMachineSpec()))
    seen: list[list[str]] = []

    def reasons() -> list[str]:
        return [e.reason for e in store.list_events(kind="VirtualMachine", name="a")]

    async def writes(_: Request) -> Result | None:
        current = store.get(VirtualMachine, "a")
        ctx.event(current, "Decided", "before the write")
        seen.append(reasons())  # not written yet: it waits for the write it belongs to
        current.status.message = "decided"
        ctx.write(current)
        seen.append(reasons())
        ctx.event(current, "Acted", "after the last write")
        return None

    await one_reconcile(writes, ctx)(Request("VirtualMachine", "a"))
    assert seen == [[], ["Decided"]]
    assert reasons() == ["Decided", "Acted"], "what is left is written at the end"

    async def loses(_: Request) -> Result | None:
        stale = store.get(VirtualMachine, "a")
        ctx.event(stale, "Lost", "describes a change that will not happen")
        other = store.get(VirtualMachine, "a")
        other.status.message = "someone else"
        store.update_status(other)
        stale.status.message = "mine"
        store.update_status(stale)  # loses the race; the event is still pending
        return None

    assert await one_reconcile(loses, ctx)(Request("VirtualMachine", "a")) == Result(
        requeue_after=CONFLICT_REQUEUE_S
    )
    assert "Lost" not in reasons()
