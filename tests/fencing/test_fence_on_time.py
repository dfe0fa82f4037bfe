"""A fence falls due on time (issue 38, host failure to recovery): a look at a silent host waits
for its probe no longer than until the fence is due, and the silence's age counts to the end of
that wait. Before, a probe of a stopped daemon waited out its whole ``probe_timeout_s`` and the
fence was then judged by the time the look began, so it came one or two looks late (row 16: at
silent-since + 70 s with a fence after 60 s)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import WallClock, make_plane
from tests.controllers.helpers import add_host
from virtplane.bootstrap import default_bmc_factory
from virtplane.controllers.host import HostReconciler
from virtplane.domain.resources import (
    FencingSpec,
    Host,
    HostConnection,
    Metadata,
    RedfishFencing,
    Secret,
    SecretSpec,
)
from virtplane.drivers.errors import HostUnreachable
from virtplane.reconcile import Request
from virtplane.store.store import Store

HANG_GUARD_S = 30.0  # a look that waits out the 600 s probe timeout is the failure, not a slow machine


async def test_a_fence_due_while_the_probe_waits_is_carried_out_by_that_look(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane = make_plane(store)
    add_host(plane, "h1")
    store.create(Secret(metadata=Metadata(name="bmc"), spec=SecretSpec(username="root", password="pw")))
    redfish = RedfishFencing(address="https://bmc.invalid", system_id="h1", credentials_secret="bmc")
    store.mutate(Host, "h1", lambda h: setattr(h.spec, "fencing", FencingSpec(redfish=redfish)))
    for key, value in (("host.liveness.disconnected_after_s", 10.0), ("host.fencing.after_s", 15.0)):
        plane.settings.set(key, value)
    plane.cache.load()
    clock = WallClock()
    plane.ctx.now = clock
    look = HostReconciler(plane.ctx, default_bmc_factory(plane.bmcs))
    await look(Request(Host.KIND, "h1"))
    assert store.get(Host, "h1").status.connection is HostConnection.UP

    driver = await plane.ctx.hosts.get("sim://h1")
    waited_s = 0.0

    async def never_answers(self: Any) -> Any:
        clock.advance(waited_s)  # the probe's wait, on the controllers' clock
        await asyncio.Event().wait()
        raise HostUnreachable("unreachable")  # never: the wait has no end

    monkeypatch.setattr(type(driver), "host_facts", never_answers)
    plane.settings.set("host.liveness.probe_timeout_s", 0.2)
    clock.advance(1)
    first_miss = clock.now
    await look(Request(Host.KIND, "h1"))  # the first missed answer: the silence begins
    assert store.get(Host, "h1").status.silent_since == first_miss

    plane.settings.set("host.liveness.probe_timeout_s", 600.0)  # the longest the setting allows
    clock.advance(14.5)  # the fence is due in 0.5 s, while this look's probe waits
    waited_s = 0.5
    async with asyncio.timeout(HANG_GUARD_S):
        await look(Request(Host.KIND, "h1"))
    host = store.get(Host, "h1")
    assert host.spec.fenced, f"not fenced by the look during which it fell due: {host.status.fence}"
    assert host.status.connection is HostConnection.DOWN
