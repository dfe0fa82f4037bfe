"""The host controller's report on a host whose driver cannot load on the control plane, or that it cannot reach."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import WallClock, eventually, libvirt_or_skip, make_plane
from tests.controllers.helpers import add_host
from tests.reconciles import reconciled
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.host import HostReconciler
from virtplane.domain.conditions import HostCondition, get_condition
from virtplane.domain.resources import Host, HostConnection
from virtplane.reconcile import Request
from virtplane.store.store import Store


async def test_a_missing_libvirt_python_is_a_condition_on_the_host_that_says_how_to_install_it(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    libvirt_or_skip()  # the driver must load once the module is back
    monkeypatch.setitem(sys.modules, "libvirt", None)  # `import libvirt` fails as if not installed
    add_host(plane, "kvm-1", uri="test:///default")

    def driver_condition() -> object:
        return get_condition(plane.store.get(Host, "kvm-1").status.conditions, HostCondition.DRIVER_LOADED)

    condition = await eventually(driver_condition)
    host = plane.store.get(Host, "kvm-1")
    assert condition.status.value == "False" and condition.reason == "DriverNotInstalled"  # type: ignore[attr-defined]
    for hint in (
        "libvirt-python is not installed",
        "pip install",
        "pkg-config --modversion libvirt",
        "apt-get",
    ):
        assert hint in host.status.message, host.status.message
    assert "cannot reach" not in host.status.message, "the host is not the problem"
    assert host.status.connection is not HostConnection.UP

    monkeypatch.delitem(sys.modules, "libvirt")  # installed now: the next look connects
    await reconciled(plane, "kvm-1", kind="Host")
    host = plane.store.get(Host, "kvm-1")
    assert host.status.connection is HostConnection.UP, host.status.message
    assert driver_condition() is None and host.status.message == ""


async def test_a_host_that_cannot_be_reached_names_its_uri_once(plane: ControlPlane) -> None:
    libvirt_or_skip()
    uri = "test:///no/such/file.xml"  # libvirt's test driver cannot open it: the connection fails
    add_host(plane, "kvm-2", uri=uri)
    host = await eventually(lambda: (h := plane.store.get(Host, "kvm-2")).status.message and h)
    assert host.status.message.startswith(f"cannot reach {uri}: "), host.status.message
    assert host.status.message.count(uri) == 1, host.status.message


async def test_an_idle_host_is_probed_at_its_interval_and_records_its_heartbeat_every_5_minutes(
    store: Store,
) -> None:
    plane = make_plane(store)
    add_host(plane, "h1")
    plane.cache.load()
    clock = WallClock()
    start = clock.now
    plane.ctx.now = clock
    look = HostReconciler(plane.ctx)

    first = await look(Request(Host.KIND, "h1"))  # Unknown -> Up: written, with the heartbeat
    recorded = store.get(Host, "h1")
    assert recorded.status.connection is HostConnection.UP and recorded.status.last_heartbeat == start
    assert first is not None and first.requeue_after == 10.0
    for seconds in (30, 30, 239):  # at 30, 60 and 299 s the probes find nothing new: nothing is written
        clock.advance(seconds)
        again = await look(Request(Host.KIND, "h1"))
        assert again is not None and again.requeue_after == 10.0
        assert store.get(Host, "h1").metadata.resource_version == recorded.metadata.resource_version
    clock.advance(1)  # 300 s
    await look(Request(Host.KIND, "h1"))
    assert store.get(Host, "h1").status.last_heartbeat == clock.now
