"""A host whose daemon stops answering while its connection is open (SIGSTOP, hung): the host
controller's probe has a time limit, so the host is found silent and Disconnected although the
call it made is never answered; its connection is closed only once no call is in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.drivers.conftest import write_node_xml
from tests.held_calls import StoppableDaemon, libvirt
from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
from virtplane.domain.resources import (
    Disk,
    Host,
    HostConnection,
    HostSpec,
    Metadata,
    PoolKind,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineSpec,
    VMPhase,
    Volume,
    VolumePhase,
    VolumeSpec,
)
from virtplane.drivers.base import HypervisorDriver, domain_name
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


async def test_a_daemon_that_stops_after_the_probe_answered_is_a_missed_answer_too(
    plane: ControlPlane, store: Store, daemon: StoppableDaemon
) -> None:
    """The probe answered, then the daemon stopped: the next call of the same look (here the
    first look's census of the host's domains; on QEMU hosts every look's accelerator and CPU
    questions) is bounded as the probe is, so liveness, and fencing after it, go on. The
    real-QEMU fencing test met this: the look waited 120 s, and no fence came."""
    daemon.stop_at("listAllDomains")
    store.create(Host(metadata=Metadata(name="h1"), spec=HostSpec(uri=URI)))
    host = await eventually(
        lambda: (h := store.get(Host, "h1")).status.connection is HostConnection.DISCONNECTED and h
    )
    assert host.status.message == f"cannot reach {URI}: no answer within 0.3s", host.status.message
    assert daemon.in_calls >= 1, "the census call is still held by the daemon"
    assert all(calls == 0 for calls in daemon.closes), f"closed with calls in it: {daemon.closes}"


@pytest.fixture
async def two_hosts(
    store: Store, daemon: StoppableDaemon, tmp_path: Path
) -> AsyncIterator[tuple[ControlPlane, str]]:
    """h1 is test:///default behind ``daemon`` (it can be cut off), h2 an independent test host;
    a connection of the test's own keeps h1's domains when the control plane closes its own
    (the test driver forgets a host whose last connection closes: a power cut, not a partition)."""
    other = write_node_xml(tmp_path / "h2.xml")

    def factory(uri: str) -> HypervisorDriver:
        return LibvirtDriver(uri, opener=daemon.open if uri == URI else None)

    keeper = libvirt.open(URI)
    plane = ControlPlane(store, driver_factory=factory, options=ControlPlaneOptions(workers=4))
    for key, value in (
        ("host.liveness.disconnected_after_s", 0.1),
        ("host.liveness.reconnected_after_s", 0.2),
        ("vm.start.backoff_base_s", 0.02),
        ("vm.start.backoff_cap_s", 0.2),
    ):
        plane.settings.set(key, value)
    await plane.start()
    yield plane, other
    await plane.stop()
    keeper.close()


async def test_a_cut_off_libvirt_host_fenced_by_the_admin_loses_its_live_stale_domain_on_return(
    two_hosts: tuple[ControlPlane, str], store: Store, daemon: StoppableDaemon
) -> None:
    """libvirt keeps running a domain that is undefined while it runs (it becomes transient):
    the stale copy of a recovered VM must be destroyed, not only undefined. A domain that is
    not virtplane's (the test driver's own ``test``) is left alone."""
    plane, other = two_hosts
    store.create(Host(metadata=Metadata(name="h1"), spec=HostSpec(uri=URI)))
    await eventually(lambda: store.get(Host, "h1").status.connection is HostConnection.UP)
    pool = StoragePoolSpec(kind=PoolKind.SHARED, cluster="default", capacity_gib=10)
    store.create(StoragePool(metadata=Metadata(name="shared"), spec=pool))
    store.create(Volume(metadata=Metadata(name="on-disk"), spec=VolumeSpec(pool="shared", size_gib=1)))
    await eventually(lambda: store.get(Volume, "on-disk").status.phase is VolumePhase.READY)
    spec = VirtualMachineSpec(run_policy=RunPolicy.ALWAYS_ON, disks=[Disk(volume="on-disk", boot_order=1)])
    vm = store.create(VirtualMachine(metadata=Metadata(name="on"), spec=spec))
    await eventually(lambda: store.get(VirtualMachine, "on").status.phase is VMPhase.RUNNING)
    store.create(Host(metadata=Metadata(name="h2"), spec=HostSpec(uri=other)))
    await eventually(lambda: store.get(Host, "h2").status.connection is HostConnection.UP)

    keeper = libvirt.open(URI)  # the test's view of h1, past the partition
    stale = keeper.lookupByName(domain_name(vm.metadata.uid))
    daemon.cut_off()
    plane.enqueue("Host", "h1")
    await eventually(lambda: store.get(Host, "h1").status.connection is HostConnection.DISCONNECTED)
    store.mutate(Host, "h1", lambda h: setattr(h.spec, "fenced", True))  # the admin is wrong
    await eventually(
        lambda: (
            (v := store.get(VirtualMachine, "on")).status.host == "h2" and v.status.phase is VMPhase.RUNNING
        )
    )
    assert stale.isActive(), "the stale copy runs on: the host was only cut off"

    daemon.reconnect()
    plane.enqueue("Host", "h1")
    # destroyed and undefined (libvirt's undefine of a live domain would leave it running)
    await eventually(lambda: stale.name() not in {d.name() for d in keeper.listAllDomains()}, timeout=15)
    # its event is written with the look's write, a moment after the domain went
    await eventually(lambda: "StaleDomainRemoved" in _host_events(store, "h1"))
    assert _host_events(store, "h1").count("StaleDomainRemoved") == 1
    assert store.get(VirtualMachine, "on").status.host == "h2"
    assert keeper.lookupByName("test").isActive(), "a domain that is not virtplane's is left alone"
    keeper.close()


def _host_events(store: Store, name: str) -> list[str]:
    return [e.reason for e in store.list_events(kind="Host", name=name, limit=1000)]
