"""Two real libvirt daemons ("hosts") running real QEMU guests under TCG.

Prerequisites come from ``scripts/qemu/setup.sh`` (run it as root first; CI
does). Without them these tests skip, unless VIRTPLANE_QEMU_REQUIRED=1 makes
that an error. Each daemon has its own mount namespace, host UUID and socket
(``scripts/qemu/libvirt-host.sh``); ``BASE/shared`` is seen by both (shared
storage), ``/var/lib/libvirt/images`` is each host's own (local storage), and
``BASE/library`` is the image library (the guest's kernel and initrd), seen by
both daemons and by the control plane at the same path.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import uvicorn

from virtplane.drivers.base import DiskAttachment, DomainSpec, ImageRef, PoolRef, domain_name
from virtplane.store.store import Store

if TYPE_CHECKING:
    from .plane import QemuPlane

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "qemu"
CACHE = Path(os.environ.get("VIRTPLANE_QEMU_DIR", REPO / ".work" / "qemu"))
KERNEL = CACHE / "guest" / "vmlinuz"
INITRD = CACHE / "guest" / "initrd.gz"
LOCAL_IMAGES = "/var/lib/libvirt/images"
KERNEL_FILE, INITRD_FILE = "vmlinuz", "initrd.gz"  # in the rig's image library
T = TypeVar("T")


def _missing_prerequisites() -> str | None:
    if os.geteuid() != 0:
        return "real-guest tests run libvirtd and need root"
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img", "qemu-io", "unshare"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            return f"{tool} is not installed (run scripts/qemu/setup.sh)"
    if not (KERNEL.exists() and INITRD.exists()):
        return f"no test guest under {CACHE} (run scripts/qemu/setup.sh)"
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "libvirt-python is not installed (run scripts/qemu/setup.sh)"
    return None


@dataclass(frozen=True)
class QemuHost:
    name: str
    uri: str


@dataclass(frozen=True)
class Rig:
    base: Path
    hosts: dict[str, QemuHost]
    console_dir: Path
    shared_pool: PoolRef
    local_pool: PoolRef
    library_pool: PoolRef
    netns: str | None = None  # the network namespace the daemons (and their guests' NICs) run in
    host_env: dict[str, dict[str, str]] = field(default_factory=dict)  # a host's extra start-script env

    def start_command(self, name: str) -> list[str]:
        """What starts host ``name``'s daemon (again: the same UUID, socket and ports)."""
        host_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.base}/{name}"))
        port = 49152 + 64 * sorted(self.hosts).index(name)
        return ["bash", str(SCRIPTS / "libvirt-host.sh"), "start", str(self.base), name, host_uuid, str(port)]

    def start_host(self, name: str) -> QemuHost:
        out = subprocess.run(
            self.start_command(name),
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "VP_NETNS": self.netns or "", **self.host_env.get(name, {})},
        )
        return QemuHost(name, out.stdout.strip().splitlines()[-1])

    def stop_host(self, name: str) -> None:
        subprocess.run(["bash", str(SCRIPTS / "libvirt-host.sh"), "stop", str(self.base), name], check=True)

    def console(self, domain: str) -> str:
        path = self.console_dir / f"{domain}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def require_prerequisites() -> None:
    """Skip (or fail, with VIRTPLANE_QEMU_REQUIRED=1) when a part of the rig cannot be had."""
    problem = _missing_prerequisites()
    if problem is not None:
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="session")
def rig() -> Iterator[Rig]:
    require_prerequisites()
    with running_rig() as started:
        yield started


@contextmanager
def running_rig(netns: str | None = None, host_env: dict[str, dict[str, str]] | None = None) -> Iterator[Rig]:
    """Two daemons, a and b (in ``netns`` if given), with the guest's image library; ``host_env``
    adds to a host's start script's environment (e.g. VP_TLS_PORT, see libvirt-host.sh)."""
    import libvirt

    base = Path(tempfile.mkdtemp(prefix="vp-qemu-"))  # short: unix socket paths are limited to 108 bytes
    console_dir = base / "console"
    console_dir.mkdir()
    (base / "shared").mkdir()
    (base / "library").mkdir()
    shutil.copyfile(KERNEL, base / "library" / KERNEL_FILE)
    shutil.copyfile(INITRD, base / "library" / INITRD_FILE)
    placeholder = {name: QemuHost(name, "") for name in ("a", "b")}
    rig = Rig(
        base=base,
        hosts=placeholder,
        console_dir=console_dir,
        shared_pool=PoolRef(name="shared", path=str(base / "shared"), shared=True),
        local_pool=PoolRef(name="local", path=LOCAL_IMAGES),
        library_pool=PoolRef(name="library", path=str(base / "library"), shared=True),
        netns=netns,
        host_env=host_env or {},
    )
    caps_cache = CACHE / "qemu-caps"
    try:
        if caps_cache.is_dir():
            shutil.copytree(caps_cache, base / "qemu-caps")
        first = rig.start_host("a")
        # The first connection probes QEMU (~8 s); later daemons and runs reuse its cache.
        libvirt.open(first.uri).close()
        probed = base / "hosts" / "a" / "cache" / "qemu" / "capabilities"
        if probed.is_dir() and not (base / "qemu-caps").exists():
            shutil.copytree(probed, base / "qemu-caps")
            shutil.copytree(probed, caps_cache, dirs_exist_ok=True)
        rig.hosts["a"] = first
        rig.hosts["b"] = rig.start_host("b")
        yield rig
    finally:
        for name in ("a", "b"):
            rig.stop_host(name)
        shutil.rmtree(base, ignore_errors=True)


async def connected_driver(rig: Rig, name: str) -> Any:
    """This process's own LibvirtDriver to daemon ``name``, its pools ensured. Keepalive on (the
    control plane's is off): the test's connection comes back soon after a's power cut."""
    from virtplane.drivers.libvirt import LibvirtDriver

    driver = LibvirtDriver(
        rig.hosts[name].uri,
        console_dir=str(rig.console_dir),
        state_dir=str(rig.base / "shared" / "memory"),
        migration_address="127.0.0.1",
        keepalive_interval_s=1,
        keepalive_count=2,
        reconnect_initial_s=0.2,
        reconnect_max_s=1.0,
    )
    await driver.connect()
    for pool in (rig.shared_pool, rig.local_pool, rig.library_pool):
        await driver.ensure_pool(pool)
    return driver


async def clear_domains(driver: Any) -> None:
    """Every domain of the daemon destroyed and undefined (between tests and bench rows)."""
    for info in await driver.list_domains():
        await driver.destroy(info.name)
        await driver.undefine(info.name)


@pytest.fixture
async def drivers(rig: Rig) -> AsyncIterator[dict[str, Any]]:
    connected = {name: await connected_driver(rig, name) for name in rig.hosts}
    yield connected
    for driver in connected.values():
        await clear_domains(driver)
        await driver.close()


def guest_spec(
    rig: Rig, uid: str, disks: tuple[DiskAttachment, ...] = (), *, memory_mib: int = 192, cmdline: str = ""
) -> DomainSpec:
    """The test guest, booted from the kernel and initrd in the rig's image library."""
    library = rig.library_pool
    return DomainSpec(
        name=domain_name(uid),
        vm_name=f"guest {uid}",
        vm_uid=uid,
        cpu=1,
        memory_mib=memory_mib,
        disks=disks,
        kernel=ImageRef(library, KERNEL_FILE),
        initrd=ImageRef(library, INITRD_FILE),
        cmdline=f"console=ttyS0 panic=-1 quiet {cmdline}".strip(),
    )


async def console_shows(rig: Rig, domain: str, text: str, *, count: int = 1, limit_s: float = 90.0) -> str:
    """Wait until the guest's serial log contains ``text`` ``count`` times; the limit guards a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        log = rig.console(domain)
        if log.count(text) >= count:
            return log
        if loop.time() > deadline:
            raise AssertionError(f"{domain}: {text!r} x{count} not on the console; it shows:\n{log[-2000:]}")
        await asyncio.sleep(0.2)


async def eventually(
    probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], limit_s: float = 60.0
) -> T:
    """Poll ``probe`` until ``accept`` holds for its result; the limit only guards against a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"still not accepted after {limit_s} s: {value!r}")
        await asyncio.sleep(0.05)


async def wait_for(condition: Callable[[], bool], limit_s: float = 60.0) -> None:
    async def probe() -> bool:
        return condition()

    await eventually(probe, bool, limit_s)


VALIDATION_S = 30.0  # a kernel reaches its panic in ~1 s under KVM, ~4 s under TCG
_VERDICTS: dict[Path, Any] = {}


async def rig_accelerator(rig: Rig, driver: Any) -> Any:
    """KVM where a validation guest boots under it on the rig's hosts, else TCG: validated once
    per rig (the hosts of each control plane get it as spec.accelerator, so a test's new store
    does not boot the validation guest again). Says which."""
    from virtplane.domain.resources import Accelerator

    if rig.base not in _VERDICTS:
        offer = await driver.accelerator_offer()
        verdict = (
            await driver.validate_kvm(str(rig.base / "library" / KERNEL_FILE), VALIDATION_S)
            if offer.kvm
            else "no kvm offered"
        )
        _VERDICTS[rig.base] = Accelerator.KVM if verdict == "" else Accelerator.TCG
        print(f"\nreal guests run under {_VERDICTS[rig.base].value}" + (f": {verdict}" if verdict else ""))
    return _VERDICTS[rig.base]


@pytest.fixture
async def qplane(store: Store, rig: Rig, drivers: dict[str, Any]) -> AsyncIterator[QemuPlane]:
    """A control plane managing the rig's two daemons (Host a, b), a shared and a local pool each."""
    from virtplane.bootstrap import ControlPlane, ControlPlaneOptions
    from virtplane.domain.resources import Metadata, PoolKind, StoragePool, StoragePoolSpec

    from .plane import SHARED, QemuPlane, add_guest_images  # it imports this module

    plane = ControlPlane(store, options=ControlPlaneOptions(workers=4, console_dir=str(rig.console_dir)))
    plane.settings.set("vm.start.backoff_base_s", 0.5)
    plane.settings.set("vm.start.backoff_cap_s", 5.0)
    plane.settings.set("host.accelerator.validation_kernel", str(rig.base / "library" / KERNEL_FILE))
    plane.settings.set("host.accelerator.validation_timeout_s", VALIDATION_S)
    result = QemuPlane(plane, rig, drivers, await rig_accelerator(rig, drivers["a"]))
    store.create(
        StoragePool(
            metadata=Metadata(name=SHARED),
            spec=StoragePoolSpec(
                kind=PoolKind.SHARED, cluster="default", path=rig.shared_pool.path, capacity_gib=100
            ),
        )
    )
    add_guest_images(store, rig)
    await plane.start()
    try:
        yield result
    finally:
        await plane.stop()
        await result.cleanup()


@pytest.fixture
async def server(qplane: QemuPlane) -> AsyncIterator[str]:
    """The plane's app under uvicorn on a free loopback port, in this loop: the API and the
    drivers share one loop, as in ``virtplane serve`` (lifespan off: ``qplane`` started the plane)."""
    config = uvicorn.Config(qplane.plane.app(), host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    served = uvicorn.Server(config)
    task = asyncio.create_task(served.serve())
    while not served.started:
        assert not task.done(), "the server did not start"
        await asyncio.sleep(0.01)
    port = served.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        await asyncio.wait_for(task, 30)
