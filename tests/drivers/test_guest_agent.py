"""The guest agent through the driver interface: the simulator (whose guests run an agent only
when told) and libvirt's test driver (whose fake agent answers for any running domain, and
which has no agent shutdown). The real qemu-ga is tests/qemu/test_guest_agent_qemu.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.drivers.test_sim import Recorder, make_spec, running, wait_for_state
from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DomainEventType, DomainState, GuestInterface
from virtplane.drivers.errors import AgentUnavailable, Unsupported
from virtplane.drivers.libvirt.agent import interfaces
from virtplane.drivers.libvirt.domain_xml import (
    GUEST_AGENT_CHANNEL,
    XmlOptions,
    agent_channel_state,
    build_domain_xml,
    spec_digest,
)
from virtplane.drivers.sim import SimCloud, SimDriver, SimGuest

ETH0 = GuestInterface(name="eth0", mac="52:54:00:00:00:01", addresses=("10.1.0.10/24",))


@pytest.fixture
def cloud() -> SimCloud:
    sim = SimCloud(boot_seconds=0.01, shutdown_seconds=0.01)
    sim.add_host("h1", vcpus=8, memory_mib=8192)
    return sim


@pytest.fixture
async def h1(cloud: SimCloud) -> SimDriver:
    driver = cloud.driver("sim://h1")
    await driver.connect()
    return driver


# ---------------------------------------------------------------------- the domain definition


def test_every_domain_has_the_agent_channel_and_its_state_is_read_from_the_live_definition() -> None:
    spec = make_spec("web")
    root = ET.fromstring(build_domain_xml(spec, XmlOptions()))
    targets = [t.attrib for t in root.findall("devices/channel[@type='unix']/target")]
    assert targets == [{"type": "virtio", "name": GUEST_AGENT_CHANNEL}]
    live = (
        "<domain><devices><channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0' "
        "state='connected'/></channel></devices></domain>"
    )
    assert agent_channel_state(live) == "connected"
    assert agent_channel_state(live.replace("connected", "disconnected")) == "disconnected"
    assert agent_channel_state("<domain><devices/></domain>") is None


def test_a_domain_defined_before_the_channel_gets_a_new_digest_so_it_is_redefined_at_its_start() -> None:
    spec = make_spec("web")
    before = XmlOptions(guest_agent=False)  # what the definitions made before the channel hashed
    assert spec_digest(spec, before, None) != spec_digest(spec, XmlOptions(), None)


# ---------------------------------------------------------------------- the simulator


async def test_a_sim_guest_without_an_agent_answers_nothing(h1: SimDriver) -> None:
    spec = make_spec("web")
    await running(h1, spec)
    assert await h1.agent_connected(spec.name) is False
    for call in (h1.guest_interfaces, h1.freeze_filesystems, h1.agent_shutdown):
        with pytest.raises(AgentUnavailable):
            await call(spec.name)


async def test_a_sim_agent_connects_at_the_end_of_the_boot_and_reports_the_guests_addresses(
    cloud: SimCloud, h1: SimDriver
) -> None:
    spec = make_spec("web")
    cloud.set_guest(spec.name, SimGuest(agent=True, interfaces=(ETH0,)))
    recorder = Recorder()
    h1.set_event_sink(recorder)
    await h1.ensure_defined(spec)
    await h1.start(spec.name)
    assert await h1.agent_connected(spec.name) is False  # booting: the agent has not started yet
    await wait_for_state(h1, spec.name, DomainState.RUNNING)
    assert (DomainEventType.AGENT_CONNECTED, None) in recorder.kinds(spec.name)
    assert await h1.agent_connected(spec.name) is True
    names = [i.name for i in await h1.guest_interfaces(spec.name)]
    assert names == ["lo", "eth0"]
    await h1.pause(spec.name)
    with pytest.raises(AgentUnavailable):  # a paused guest's agent cannot answer
        await h1.guest_interfaces(spec.name)


async def test_a_sim_freeze_holds_until_the_thaw_and_a_second_thaw_thaws_nothing(
    cloud: SimCloud, h1: SimDriver
) -> None:
    spec = make_spec("db")
    cloud.set_guest(spec.name, SimGuest(agent=True, filesystems=2))
    await running(h1, spec)
    assert await h1.freeze_filesystems(spec.name) == 2
    with pytest.raises(AgentUnavailable):
        await h1.freeze_filesystems(spec.name)
    assert await h1.thaw_filesystems(spec.name) == 2
    assert await h1.thaw_filesystems(spec.name) == 0


async def test_a_sim_guest_that_ignores_acpi_stops_only_through_its_agent(
    cloud: SimCloud, h1: SimDriver
) -> None:
    spec = make_spec("deaf")
    cloud.set_guest(spec.name, SimGuest(agent=True, ignores_acpi=True))
    await running(h1, spec)
    await h1.shutdown(spec.name)
    info = await h1.get_info(spec.name)
    assert info is not None and info.state is DomainState.RUNNING  # the button was not heard
    await h1.agent_shutdown(spec.name)
    info = await wait_for_state(h1, spec.name, DomainState.SHUTOFF)
    assert info.exit_reason is ExitReason.STOPPED_BY_SYSTEM


# ---------------------------------------------------------------------- libvirt's test driver


async def test_libvirt_agent_calls_on_the_test_driver(libvirt_driver: Any) -> None:
    spec = make_spec("web", memory_mib=64)
    await libvirt_driver.ensure_defined(spec)
    assert await libvirt_driver.agent_connected(spec.name) is False
    with pytest.raises(AgentUnavailable):  # off: no agent answers
        await libvirt_driver.freeze_filesystems(spec.name)
    await libvirt_driver.start(spec.name)
    assert await libvirt_driver.agent_connected(spec.name) is True
    assert await libvirt_driver.guest_interfaces(spec.name) == ()  # it has no NICs
    assert await libvirt_driver.freeze_filesystems(spec.name) == 2  # the test driver's two
    assert await libvirt_driver.thaw_filesystems(spec.name) == 2
    with pytest.raises(Unsupported):
        await libvirt_driver.agent_shutdown(spec.name)


def test_libvirt_interface_addresses_become_guest_interfaces() -> None:
    reported = {
        "eth0": {"hwaddr": "52:54:00:aa:bb:cc", "addrs": [{"addr": "10.1.0.7", "prefix": 24, "type": 0}]},
        "lo": {"hwaddr": "00:00:00:00:00:00", "addrs": None},
    }
    assert interfaces(reported) == (
        GuestInterface(name="eth0", mac="52:54:00:aa:bb:cc", addresses=("10.1.0.7/24",)),
        GuestInterface(name="lo", mac="00:00:00:00:00:00"),
    )
