"""``ControllerContext.write`` and ``durable`` of an object as the caller has it and a ``Change``
of another, in one transaction (a maintenance and its host's state). A lost race on the
Change's object is tried again on a fresh read; one on the caller's object is the caller's."""

from __future__ import annotations

import pytest

from tests.conftest import make_plane
from tests.controllers.helpers import add_host
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.context import Change
from virtplane.domain.resources import Host, HostMaintenance, HostMaintenanceSpec, Metadata
from virtplane.store.errors import Conflict
from virtplane.store.store import Store


@pytest.fixture
def plane(store: Store) -> ControlPlane:
    """Not started: no controller writes the host or takes the maintenance up meanwhile."""
    return make_plane(store)


def _maintenance(plane: ControlPlane) -> HostMaintenance:
    return plane.store.create(
        HostMaintenance(metadata=Metadata(name="h1"), spec=HostMaintenanceSpec(host="h1"))
    )


def _labelled(plane: ControlPlane, value: str) -> None:
    """Another writer of the host (its own controller, in the server)."""

    def label(host: Host) -> None:
        host.status.message = value

    plane.store.mutate(Host, "h1", label, status_only=True)


async def test_a_lost_race_on_the_object_read_fresh_is_tried_again_with_the_same_events(
    plane: ControlPlane,
) -> None:
    add_host(plane, "h1")
    m = _maintenance(plane)
    m.status.message = "ended"
    looks = 0

    def change(host: Host) -> None:
        nonlocal looks
        looks += 1
        if looks == 1:  # someone else writes the host between this read and the commit
            _labelled(plane, "someone else")
        host.status.bridges = ["br0"]

    ctx = plane.ctx
    async with ctx.events_scope():
        ctx.event(("Host", "h1"), "Ended", "recorded once, with the write that lands")
        written, host = await ctx.write(m, Change(Host, "h1", change))
    assert looks == 2
    assert written.status.message == "ended" and host.status.bridges == ["br0"]
    assert plane.store.get(Host, "h1").status.message == "someone else", "the other write is kept"
    reasons = [e.reason for e in plane.store.list_events(kind="Host", name="h1")]
    assert reasons.count("Ended") == 1


async def test_a_lost_race_on_the_callers_object_is_the_callers(plane: ControlPlane) -> None:
    add_host(plane, "h1")
    m = _maintenance(plane)
    stale = m.model_copy(deep=True)
    m.status.message = "first"
    plane.store.update_status(m)
    looks: list[Host] = []
    with pytest.raises(Conflict) as lost:
        await plane.ctx.write(stale, Change(Host, "h1", looks.append))
    assert lost.value.kind == HostMaintenance.KIND
    assert len(looks) == 1, "not tried again: reading the host again cannot help"


async def test_a_durable_point_is_committed_before_its_writer_first_yields(plane: ControlPlane) -> None:
    """``durable``: nothing else runs between the checks before it and its commit (a migration's
    intent after the target's room was checked). ``write`` waits for the turn's group commit."""
    add_host(plane, "h1")
    m = _maintenance(plane)
    m.status.message = "planned"
    landing = plane.ctx.durable("maintenance.planned", m)
    with pytest.raises(StopIteration) as done:  # finished on its first step: it never yielded
        landing.send(None)
    assert done.value.value.status.message == "planned"
    assert plane.store.get(HostMaintenance, "h1").status.message == "planned"
    assert plane.ctx.cache.get(HostMaintenance, "h1") == done.value.value, "the cache has it at once"

    grouped = plane.ctx.write(done.value.value)
    grouped.send(None)  # suspended: the group commit comes at the loop's next turn
    grouped.close()


async def test_a_durable_point_has_a_name_a_test_can_arm(plane: ControlPlane) -> None:
    add_host(plane, "h1")
    with pytest.raises(AssertionError, match=r"crashpoints\.POINTS"):
        await plane.ctx.durable("no.such.point", _maintenance(plane))
