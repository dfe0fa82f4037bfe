"""A host whose daemon stops answering while its connection is open (SIGSTOP, hung): the host
controller's probe has a time limit, so the host is found silent and Disconnected although the
call it made is never answered; its connection is closed only once no call is in it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import eventually
from tests.held_calls import StoppableDaemon
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import Host, HostConnection, HostSpec, Metadata
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.libvirt import LibvirtDriver
from virtplane.store.store import Store

URI = "test:///default"


@pytest.fixture
def daemon() -> StoppableDaemon:
    return StoppableDaemon(URI)


@pytest.fixture
async def plane(store: Store, daemon: StoppableDaemon) -> AsyncIterator[ControlPlane]:
    def factory(uri: str) -> HypervisorDriver:
        return LibvirtDriver(uri, opener=daemon.open)

    plane = ControlPlane(store, driver_factory=factory, options=ControlPlaneOptions(workers=4))
    for key, value in (
        ("host.liveness.probe_timeout_s", 0.3),
        ("host.liveness.disconnected_after_s", 0.5),
    ):
        plane.settings.set(key, value)
    await plane.start()
    yield plane
    daemon.resume()  # the calls it holds return, and their connections are closed
    await plane.stop()


async def test_a_probe_the_daemon_never_answers_is_a_missed_answer(
    plane: ControlPlane, store: Store, daemon: StoppableDaemon
) -> None:
    store.create(Host(metadata=Metadata(name="h1"), spec=HostSpec(uri=URI)))
    await eventually(lambda: store.get(Host, "h1").status.connection is HostConnection.UP)

    daemon.stop()
    store.mutate(Host, "h1", lambda h: h.metadata.labels.update(poke="1"))  # probe now, not in 30 s
    host = await eventually(
        lambda: (h := store.get(Host, "h1")).status.connection is HostConnection.DISCONNECTED and h
    )
    assert host.status.message == f"cannot reach {URI}: no answer within 0.3s", host.status.message
    assert daemon.in_calls >= 1, "the probe's call is still held by the daemon"
    assert all(calls == 0 for calls in daemon.closes), f"closed with calls in it: {daemon.closes}"
