"""The libvirt driver against libvirt's test hypervisor (no daemon): what the contract cannot see."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    Capability,
    DiskAttachment,
    DomainEvent,
    DomainEventType,
    DomainSpec,
    DomainState,
    HypervisorDriver,
    ImageRef,
    PoolRef,
    domain_name,
)
from virtplane.drivers.errors import ImageRefused, NotFound, PermanentError, Unsupported

from .conftest import wait_for

libvirt = libvirt_or_skip()

from virtplane.drivers.libvirt import LibvirtDriver  # noqa: E402
from virtplane.drivers.libvirt.domain import LibvirtDomain  # noqa: E402
from virtplane.drivers.libvirt.memory import state_pool_name  # noqa: E402
from virtplane.drivers.libvirt.migration import MigrationTracker  # noqa: E402


def make_spec(uid: str, **overrides: Any) -> DomainSpec:
    fields: dict[str, Any] = {
        "name": domain_name(uid),
        "vm_name": uid,
        "vm_uid": uid,
        "cpu": 1,
        "memory_mib": 128,
    }
    fields.update(overrides)
    return DomainSpec(**fields)


LIBRARY = PoolRef(name="library", path="/srv/library", shared=True)


async def library_file(driver: LibvirtDriver, file: str, fmt: str = "raw") -> ImageRef:
    """A file an admin placed in the library (the test driver keeps it in memory)."""
    from virtplane.drivers.libvirt.domain_xml import volume_xml

    await driver.ensure_pool(LIBRARY)
    pool = driver._connection.get().storagePoolLookupByName(LIBRARY.name)
    pool.createXML(volume_xml(file, 1024 * 1024, fmt), 0)
    return ImageRef(LIBRARY, file, fmt)


async def connected(uri: str, events: list[DomainEvent] | None = None, **kwargs: Any) -> LibvirtDriver:
    driver = LibvirtDriver(uri, **kwargs)
    if events is not None:
        driver.set_event_sink(events.append)
    await driver.connect()
    return driver


def test_is_a_hypervisor_driver() -> None:
    driver = LibvirtDriver("test:///default")
    assert isinstance(driver, HypervisorDriver)
    assert Capability.VOLUME_RESIZE not in driver.capabilities
    assert Capability.LIVE_MIGRATION in LibvirtDriver("qemu:///system").capabilities


async def test_node_files_are_independent_hosts(node_uri: Callable[[str], str]) -> None:
    a = await connected(node_uri("a"))
    b = await connected(node_uri("b"))
    try:
        await a.ensure_defined(make_spec("only-on-a"))
        assert [d.vm_uid for d in await a.list_domains()] == ["only-on-a"]
        assert await b.list_domains() == []
        facts = await a.host_facts()
        assert (facts.vcpus, facts.memory_mib) == (8, 16384)
    finally:
        await a.close()
        await b.close()


async def test_guest_power_off_is_told_apart_from_ours(node_uri: Callable[[str], str]) -> None:
    uri = node_uri("h")
    events: list[DomainEvent] = []
    driver = await connected(uri, events)
    try:
        spec = make_spec("guest-off")
        await driver.ensure_defined(spec)
        await driver.start(spec.name)
        # A power-off nobody in the control plane asked for, as if the guest ran `poweroff`. Each open
        # of a node file is a host of its own, so this goes through the driver's own connection.
        dom = driver._connection.get().lookupByName(spec.name)
        dom.shutdown()
        info = await driver.get_info(spec.name)
        assert info is not None and info.exit_reason is ExitReason.GUEST_SHUTDOWN
        await wait_for(
            lambda: any(
                e.type is DomainEventType.STOPPED and e.reason is ExitReason.GUEST_SHUTDOWN for e in events
            )
        )
        # And one we asked for; a start clears the request again.
        await driver.start(spec.name)
        await driver.shutdown(spec.name)
        info = await driver.get_info(spec.name)
        assert info is not None and info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
        await driver.start(spec.name)
        driver._connection.get().lookupByName(spec.name).shutdown()
        info = await driver.get_info(spec.name)
        assert info is not None and info.exit_reason is ExitReason.GUEST_SHUTDOWN
    finally:
        await driver.close()


async def test_our_shutdown_survives_a_control_plane_restart_and_a_redefinition() -> None:
    # test:///default is one host per process, so a second driver sees the same domains.
    first = await connected("test:///default")
    spec = make_spec("restart-proof")
    try:
        await first.ensure_defined(spec)
        await first.start(spec.name)
        await first.shutdown(spec.name)
        second = await connected("test:///default")
        try:
            info = await second.get_info(spec.name)
            assert info is not None and info.exit_reason is ExitReason.STOPPED_BY_SYSTEM
            await second.ensure_defined(make_spec("restart-proof", cpu=2))  # a changed spec is redefined
            info = await second.get_info(spec.name)
            assert info is not None and (info.cpu, info.exit_reason) == (2, ExitReason.STOPPED_BY_SYSTEM)
        finally:
            await second.undefine(spec.name)
            await second.close()
    finally:
        await first.close()


async def test_definition_carries_metadata_and_console_log(node_uri: Callable[[str], str]) -> None:
    events: list[DomainEvent] = []
    driver = await connected(node_uri("h"), events, console_dir="/var/log/virtplane")
    try:
        kernel, initrd = await library_file(driver, "vmlinuz"), await library_file(driver, "initrd.gz")
        spec = make_spec(
            "meta", vm_name="Web <1> & co", kernel=kernel, initrd=initrd, cmdline="console=ttyS0"
        )
        await driver.ensure_defined(spec)
        xml = driver._connection.get().lookupByName(spec.name).XMLDesc(0)
        assert (
            "<kernel>/srv/library/vmlinuz</kernel>" in xml
            and "<initrd>/srv/library/initrd.gz</initrd>" in xml
        )
        assert "<title>Web &lt;1&gt; &amp; co</title>" in xml
        assert "/var/log/virtplane/virtplane-meta.log" in xml
        assert "https://virtplane.io/xmlns/libvirt/instance/1" in xml
        await wait_for(lambda: any(e.type is DomainEventType.DEFINED for e in events))
        # Redefining the same spec is a no-op. libvirt delivers events in order, so once STARTED
        # is in, a DEFINED from the second ensure_defined would be too.
        await driver.ensure_defined(spec)
        await driver.start(spec.name)
        await wait_for(lambda: any(e.type is DomainEventType.STARTED for e in events))
        assert [e.type for e in events if e.domain] == [DomainEventType.DEFINED, DomainEventType.STARTED]
    finally:
        await driver.close()


async def test_storage_rules(node_uri: Callable[[str], str]) -> None:
    driver = await connected(node_uri("h"))
    pool = PoolRef(name="p", path="/srv/p")
    try:
        await driver.ensure_pool(pool)
        await driver.ensure_pool(pool)
        with pytest.raises(PermanentError):
            await driver.ensure_pool(PoolRef(name="p", path="/elsewhere"))
        for bad in ("../x", "a/b", ".hidden", ""):
            with pytest.raises(PermanentError):
                await driver.create_volume(pool, bad, 1)
        with pytest.raises(PermanentError):
            await driver.snapshot_volume(pool, "v", "../../etc")
        first = await driver.create_volume(pool, "v", 1)
        assert await driver.create_volume(pool, "v", 1) == first  # idempotent
        with pytest.raises(Unsupported):
            await driver.resize_volume(pool, "v", 2)
        with pytest.raises(NotFound):
            await driver.snapshot_volume(pool, "missing", "s")
        image = await library_file(driver, "base.qcow2", "qcow2")
        assert (await driver.inspect_image(image)).format == "qcow2"
        # (libvirt's test driver clones only within one pool; tests/qemu copy images for real)
        with pytest.raises(ImageRefused, match="is qcow2, not raw"):
            await driver.create_volume(pool, "wrong-format", 1, ImageRef(LIBRARY, "base.qcow2", "raw"))
        with pytest.raises(NotFound):
            await driver.create_volume(pool, "from-nothing", 1, ImageRef(LIBRARY, "missing.qcow2", "qcow2"))
        for escape in ("../p/v", "/srv/p/v", "sub/x"):
            with pytest.raises(PermanentError):
                await driver.inspect_image(ImageRef(LIBRARY, escape, "qcow2"))
        assert await driver.get_info("virtplane-none") is None
    finally:
        await driver.close()


async def test_revert_refuses_a_disk_in_use(node_uri: Callable[[str], str]) -> None:
    driver = await connected(node_uri("h"))
    pool = PoolRef(name="p", path="/srv/p")
    try:
        vol = await driver.create_volume(pool, "root", 1)
        handle = await driver.snapshot_volume(pool, "root", "s1")
        spec = make_spec("in-use", disks=(DiskAttachment(path=vol.path, boot_order=1),))
        await driver.ensure_defined(spec)
        await driver.start(spec.name)
        with pytest.raises(PermanentError):
            await driver.revert_volume(pool, "root", handle)
        await driver.destroy(spec.name)
        await driver.revert_volume(pool, "root", handle)
    finally:
        await driver.close()


async def test_memory_restore_refuses_a_running_domain(node_uri: Callable[[str], str]) -> None:
    driver = await connected(node_uri("h"))
    try:
        spec = make_spec("mem")
        await driver.ensure_defined(spec)
        with pytest.raises(PermanentError):
            await driver.save_memory(spec.name, "s1")
        await driver.start(spec.name)
        handle = await driver.save_memory(spec.name, "s1")
        with pytest.raises(PermanentError):
            await driver.restore_memory(spec, handle)
        await driver.pause(spec.name)
        paused_handle = await driver.save_memory(spec.name, "s2")  # a paused domain stays paused
        info = await driver.get_info(spec.name)
        assert info is not None and info.state is DomainState.PAUSED
        await driver.delete_volume_snapshot(paused_handle)
    finally:
        await driver.close()


async def test_works_without_a_connection_only_as_far_as_it_should() -> None:
    driver = LibvirtDriver("test:///default")
    assert driver.connected is False
    from virtplane.drivers.errors import HostUnreachable

    with pytest.raises(HostUnreachable):
        await driver.list_domains()
    await driver.close()


@pytest.mark.parametrize(
    ("state_dir", "name"),
    [
        ("/var/lib/libvirt/virtplane/state", "virtplane-state"),
        ("/var/lib/libvirt/virtplane/state/", "virtplane-state"),
    ],
)
def test_the_default_state_dir_keeps_the_plain_pool_name(state_dir: str, name: str) -> None:
    assert state_pool_name(state_dir) == name


def test_two_state_dirs_on_one_daemon_get_two_pools() -> None:
    # A pool's name fixes its path: a shared name made the second driver's memory images fail.
    names = {state_pool_name(d) for d in ("/srv/a", "/srv/b", "/var/lib/libvirt/virtplane/state")}
    assert len(names) == 3
    assert state_pool_name("/srv/a") == state_pool_name("/srv/a/")


def test_a_domain_gone_between_its_lookup_and_the_job_query_has_no_migration() -> None:
    """A finished live migration undefines the source domain at any moment, also between the
    lookup and ``isActive``: that is "no migration here", not an error (a real-QEMU migration
    test failed with Domain not found polling the job as the migration ended)."""
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(
            "<domain type='test'><name>gone-mid-query</name><memory>1024</memory>"
            "<os><type>hvm</type></os></domain>"
        )
        found = LibvirtDomain.find(conn, "gone-mid-query")
        assert found is not None
        dom.undefine()
        assert MigrationTracker(on_failed=lambda job: None).current("gone-mid-query", found) is None
    finally:
        conn.close()
