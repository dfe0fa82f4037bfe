"""The real parts of rows 11-16: the test rig's two libvirt daemons and a control plane on them,
and what the rows time directly on those daemons, without the control plane (their bounds).

The rig is the one the real-guest tests use (``tests/qemu/conftest.py``: two daemons on this
machine, the busybox test guest that prints ``GUEST-UP`` on its serial console, whose log
file this process reads). Each row gets a control plane of its own (a new store, the product's
default options) as the ``qplane`` fixture builds it, so one row's leftovers (a fenced host, a
maintenance) do not reach the next. The accelerator is validated once per rig, as the tests do,
and given to the hosts as ``spec.accelerator``; each row reads back what its Host's
``status.accelerator`` says it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.qemu.conftest import (
    KERNEL_FILE,
    VALIDATION_S,
    Rig,
    clear_domains,
    connected_driver,
    rig_accelerator,
    running_rig,
)
from tests.qemu.plane import SHARED, QemuPlane, add_guest_images, guest_images_ready

from virtplane.domain.resources import Accelerator, Host, Metadata, PoolKind, StoragePool, StoragePoolSpec
from virtplane.drivers.base import MigrationRequest
from virtplane.store.sealing import Keyring
from virtplane.store.store import Store, sqlite_url

POLL_S = 0.02  # how often a console log is read: the same for our boots and the bound's
LIMIT_S = 180.0  # guards against a hang only


@dataclass
class RealRig:
    rig: Rig
    drivers: dict[str, Any]  # LibvirtDriver per daemon: what the bounds use, and the cleanup
    verdict: Accelerator  # the rig's validation: what the hosts' spec.accelerator says
    work: Path

    def console_log(self, domain: str) -> Path:
        return self.rig.console_dir / f"{domain}.log"

    def conn(self, host: str) -> Any:
        import libvirt

        return libvirt.open(self.rig.hosts[host].uri)


@contextlib.asynccontextmanager
async def rig_session(work: Path) -> AsyncIterator[RealRig]:
    """The two daemons, a driver connected to each, and the accelerator's verdict."""
    with running_rig() as rig:
        drivers: dict[str, Any] = {}
        try:
            for name in rig.hosts:
                drivers[name] = await connected_driver(rig, name)
            verdict = await rig_accelerator(rig, drivers["a"])
            yield RealRig(rig, drivers, verdict, work)
        finally:
            for driver in drivers.values():
                with contextlib.suppress(Exception):
                    await clear_domains(driver)
                await driver.close()


@contextlib.asynccontextmanager
async def control_plane(
    real: RealRig, name: str, settings: dict[str, Any] | None = None
) -> AsyncIterator[QemuPlane]:
    """A control plane of its own (store under ``work/name``) on the rig, with the shared pool and
    the guest's images, no hosts yet (``QemuPlane.add_host``). ``settings`` are set before it starts."""
    from virtplane.bootstrap import ControlPlane, ControlPlaneOptions

    data = real.work / name
    data.mkdir(parents=True, exist_ok=True)
    store = Store(sqlite_url(data / "plane.db"), keyring=Keyring.load_or_create(data / "secrets.key"))
    store.migrate()
    plane = ControlPlane(store, options=ControlPlaneOptions(console_dir=str(real.rig.console_dir)))
    plane.settings.set("host.accelerator.validation_kernel", str(real.rig.base / "library" / KERNEL_FILE))
    plane.settings.set("host.accelerator.validation_timeout_s", VALIDATION_S)
    for key, value in (settings or {}).items():
        plane.settings.set(key, value)
    qplane = QemuPlane(plane, real.rig, real.drivers, real.verdict)
    store.create(
        StoragePool(
            metadata=Metadata(name=SHARED),
            spec=StoragePoolSpec(
                kind=PoolKind.SHARED, cluster="default", path=real.rig.shared_pool.path, capacity_gib=100
            ),
        )
    )
    add_guest_images(store, real.rig)
    await plane.start()
    try:
        yield qplane
    finally:
        await plane.stop()
        await qplane.cleanup()
        store.close()


async def hosts_ready(qplane: QemuPlane, *names: str) -> None:
    for name in names:
        await qplane.add_host(name)
    await guest_images_ready(qplane.store)


def accelerator_used(qplane: QemuPlane, host: str) -> str:
    """What the Host's status says its guests run under, and why where it is not KVM."""
    status = qplane.store.get(Host, host).status.accelerator
    if status is None:
        return "unknown"
    offered = "/".join(a.value for a in status.offered)
    return f"{status.used.value} (offered {offered})" if status.used else f"none (offered {offered})"


async def domain_xml(real: RealRig, host: str, domain: str) -> str:
    """The domain's XML as daemon ``host`` holds it (what the control plane defined)."""
    conn = await asyncio.to_thread(real.conn, host)
    try:
        dom = await asyncio.to_thread(conn.lookupByName, domain)
        return str(await asyncio.to_thread(dom.XMLDesc, 0))
    finally:
        await asyncio.to_thread(conn.close)


async def console_count(log: Path, text: str, count: int = 1, limit_s: float = LIMIT_S) -> float:
    """Wait until the serial log holds ``text`` ``count`` times; the monotonic time it was seen."""
    deadline = time.monotonic() + limit_s
    while True:
        shown = log.read_text(errors="replace") if log.exists() else ""
        if shown.count(text) >= count:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{log.name}: {text!r} x{count} not on the console after {limit_s:.0f} s")
        await asyncio.sleep(POLL_S)


def renamed_xml(xml: str, name: str, log: Path) -> str:
    """The same domain under another name: no UUID (libvirt gives one) and its own serial log."""
    root = ET.fromstring(xml)
    root.find("name").text = name  # type: ignore[union-attr]
    uuid = root.find("uuid")
    if uuid is not None:
        root.remove(uuid)
    for serial_log in root.iterfind("./devices/serial/log"):
        serial_log.set("file", str(log))
    for console_log in root.iterfind("./devices/console/log"):
        console_log.set("file", str(log))
    return ET.tostring(root, encoding="unicode")


async def direct_boot_s(real: RealRig, xml: str, name: str) -> float:
    """libvirt alone: define and create ``xml`` on daemon a, until GUEST-UP on its console."""
    log = real.console_log(name)
    log.unlink(missing_ok=True)
    conn = await asyncio.to_thread(real.conn, "a")
    try:
        started = time.monotonic()
        dom = await asyncio.to_thread(conn.defineXML, renamed_xml(xml, name, log))
        await asyncio.to_thread(dom.create)
        seen = await console_count(log, "GUEST-UP")
        await asyncio.to_thread(dom.destroy)
        await asyncio.to_thread(dom.undefine)
        return seen - started
    finally:
        await asyncio.to_thread(conn.close)


async def direct_migration_s(real: RealRig, domain: str, source: str, target: str) -> float:
    """libvirt alone: migrate ``domain`` from ``source`` to ``target`` with the driver's own
    parameters and flags (``migration_parameters``), timed around ``migrateToURI3``."""
    from virtplane.drivers.libvirt.migration import migration_parameters

    conn = await asyncio.to_thread(real.conn, source)
    try:
        dom = await asyncio.to_thread(conn.lookupByName, domain)
        xml = await asyncio.to_thread(dom.XMLDesc, 0)
        request = MigrationRequest(domain=domain, target_uri=real.rig.hosts[target].uri)
        params, flags = migration_parameters(request, xml, migration_address="127.0.0.1")
        started = time.monotonic()
        await asyncio.to_thread(dom.migrateToURI3, real.rig.hosts[target].uri, params, flags)
        return time.monotonic() - started
    finally:
        await asyncio.to_thread(conn.close)


def loopback_mib_s(mib: int, chunk_mib: int = 4) -> float:
    """A plain TCP copy of ``mib`` MiB between two sockets on 127.0.0.1 (the migration link of
    the rig: both daemons' QEMUs talk over loopback), in MiB per s."""
    chunk = bytes(chunk_mib * 1024 * 1024)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        received = [0]

        def drain() -> None:
            peer, _ = listener.accept()
            with peer:
                buffer = bytearray(chunk_mib * 1024 * 1024)
                while (n := peer.recv_into(buffer)) > 0:
                    received[0] += n

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(listener.getsockname()) as sender:
            started = time.monotonic()
            for _ in range(max(1, mib // chunk_mib)):
                sender.sendall(chunk)
        reader.join()
        elapsed = time.monotonic() - started
    return received[0] / (1024 * 1024) / elapsed
