"""Hosts reached over ``qemu+ssh`` and ``qemu+tls``, on the rig's two real libvirt daemons.

Daemon a is reached through an sshd this module starts on a loopback port (its own host key,
one authorized client key, a known_hosts of its own); daemon b listens for TLS on a loopback
port with certificates of a CA this module makes (libvirt's ``pkipath`` layout). The control
plane's Hosts carry those URIs; a live migration from a to b is driven by daemon a, which opens
b's ``qemu+tls`` URI itself, with b's ``migration_address`` set so that the migration's data
does not depend on b's host name. A refused certificate or key leaves the Host not connected,
with libvirt's reason in its status message, within seconds (no hang, no 500).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import eventually
from tests.crash.server import free_port
from virtplane.domain.resources import (
    Host,
    HostConnection,
    HostSpec,
    Metadata,
    MigrateSpec,
    OperationType,
    RunPolicy,
    VMPhase,
)
from virtplane.drivers.base import DisplayStream

from .conftest import QemuHost, Rig, console_shows, require_prerequisites, running_rig
from .plane import QemuPlane
from .transports import (
    Pki,
    Sshd,
    keygen,
    make_pki,
    require_tool,
    running_sshd,
    ssh_command,
    tls_uri,
)

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

REFUSAL_LIMIT_S = 30.0  # a refused connection fails in well under a second; this guards a hang


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    require_tool("openssl")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def rig_and_sshd(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rig, Sshd]]:
    """This module's daemons: a reached over qemu+ssh, through an sshd in a's mount namespace (it
    sees a's files, as a host's own sshd does), b over qemu+tls."""
    require_prerequisites()
    require_tool("/usr/sbin/sshd")
    require_tool("nc")
    require_tool("nsenter")
    port = free_port()
    tls = {"VP_TLS_PORT": str(port), "VP_TLS_DIR": str(pki.server_dir)}
    with running_rig(host_env={"b": tls}) as started:
        daemon_a = int((started.base / "hosts" / "a" / "libvirtd.pid").read_text())
        with running_sshd(tmp_path_factory.mktemp("ssh"), mounts_of=daemon_a) as sshd:
            unix_socket = started.hosts["a"].uri.split("socket=", 1)[1]
            started.hosts["a"] = QemuHost("a", sshd.uri(unix_socket))
            started.hosts["b"] = QemuHost("b", tls_uri(port, pki.client_dir))
            yield started, sshd


@pytest.fixture(scope="module")
def rig(rig_and_sshd: tuple[Rig, Sshd]) -> Rig:
    return rig_and_sshd[0]


@pytest.fixture(scope="module")
def sshd(rig_and_sshd: tuple[Rig, Sshd]) -> Sshd:
    return rig_and_sshd[1]


async def test_hosts_over_ssh_and_tls_run_guests_and_migrate_live(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    assert qplane.store.get(Host, "a").spec.uri.startswith("qemu+ssh://")
    await qplane.add_volume("tr-root")
    qplane.add_vm("tr", RunPolicy.MANUAL, "tr-root")
    await qplane.operate("tr", OperationType.START)
    await console_shows(qplane.rig, qplane.domain("tr"), "GUEST-UP")
    assert qplane.vm("tr").status.host == "a" and await qplane.runs_on("tr") == ["a"]

    await qplane.add_host("b", migration_address="127.0.0.1")
    assert qplane.store.get(Host, "b").spec.uri.startswith("qemu+tls://")
    await qplane.operate("tr", OperationType.MIGRATE, migrate=MigrateSpec(target_host="b"))
    current = await qplane.wait_settled("tr", VMPhase.RUNNING)
    assert current.status.host == "b" and await qplane.runs_on("tr") == ["b"]
    assert qplane.console("tr").count("GUEST-UP") == 1, "the same boot, moved live"

    await qplane.operate("tr", OperationType.STOP)
    assert await qplane.runs_on("tr") == []

    def disabled(host: Host) -> None:
        host.spec.enabled = False

    qplane.store.mutate(Host, "a", disabled)  # so the start can only go to b, over TLS
    await qplane.operate("tr", OperationType.START)
    await console_shows(qplane.rig, qplane.domain("tr"), "GUEST-UP", count=2)
    assert qplane.vm("tr").status.host == "b" and await qplane.runs_on("tr") == ["b"]


async def test_a_refused_certificate_or_key_says_why_on_the_host(
    qplane: QemuPlane, pki: Pki, sshd: Sshd, tmp_path: Path
) -> None:
    tls_port = int(qplane.rig.host_env["b"]["VP_TLS_PORT"])
    unauthorized = tmp_path / "unauthorized_key"
    keygen(unauthorized, "not-in-authorized-keys")
    impostor = tmp_path / "impostor_key"  # what known_hosts says the sshd's host key is
    keygen(impostor, "not-the-host-key")
    wrong_known_hosts = tmp_path / "known_hosts"
    wrong_known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {impostor.with_suffix('.pub').read_text()}")
    suspicious_ssh = ssh_command(tmp_path, wrong_known_hosts)
    unix_socket = qplane.rig.hosts["a"].uri.split("socket=", 1)[1].split("&", 1)[0]
    refused = {
        "wrong-ca": (tls_uri(tls_port, pki.stranger_dir), "Failed to verify peer's certificate"),
        "wrong-key": (sshd.uri(unix_socket, keyfile=unauthorized), "Permission denied (publickey)"),
        "wrong-host-key": (sshd.uri(unix_socket, command=suspicious_ssh), "Host key verification failed"),
    }
    for name, (uri, _) in refused.items():
        qplane.store.create(Host(metadata=Metadata(name=name), spec=HostSpec(uri=uri)))

    def said(name: str) -> str:
        return qplane.store.get(Host, name).status.message

    async with qplane.api() as api:
        for name, (_, reason) in refused.items():
            await eventually(lambda: said(name), timeout=REFUSAL_LIMIT_S)  # noqa: B023 (awaited here)
            host = qplane.store.get(Host, name)
            assert host.status.connection is not HostConnection.UP
            assert reason in host.status.message, host.status.message
            response = await api.get(f"/v1/hosts/{name}")
            assert response.status_code == 200, response.text
            assert reason in response.json()["status"]["message"]


async def test_a_screen_over_ssh_is_its_vnc_socket_through_ssh_and_over_tls_is_refused(
    qplane: QemuPlane,
) -> None:
    """libvirt passes a connection to a VM's VNC server (virDomainOpenGraphicsFD) only over a
    local UNIX socket. Over ssh the VM's VNC server listens on a UNIX socket on the host, which
    the screen service reaches through ssh with the URI's own key and known_hosts: a VNC viewer's
    handshake goes through. Over tls the screen is refused with what to do (ScreenUnsupported,
    a 409); the screenshot, a stream on the connection, works on both."""
    from tests.drivers.test_png import decoded
    from virtplane.domain.errors import Refused

    displays = qplane.plane.api_context.displays
    assert displays is not None
    await qplane.add_host("a")  # scr starts on a
    await qplane.add_volume("scr-root")
    qplane.add_vm("scr", RunPolicy.ALWAYS_ON, "scr-root")
    vm = await qplane.wait_settled("scr", VMPhase.RUNNING)
    assert vm.status.host == "a"
    session = await displays.open("scr")
    try:
        width, height, name = await asyncio.wait_for(rfb_handshake(session.stream), 60.0)
    finally:
        await session.stream.close()
    assert width > 0 and height > 0 and name, (width, height, name)
    width, height, _ = decoded(await displays.screenshot("scr"))
    assert width > 0 and height > 0

    await qplane.add_host("b", migration_address="127.0.0.1")
    await qplane.operate("scr", OperationType.MIGRATE, migrate=MigrateSpec(target_host="b"))
    assert (await qplane.wait_settled("scr", VMPhase.RUNNING)).status.host == "b"
    with pytest.raises(Refused) as refused:
        await displays.open("scr")
    assert refused.value.reason == "ScreenUnsupported"
    assert "reach this host as qemu+ssh://" in str(refused.value), refused.value
    width, height, _ = decoded(await displays.screenshot("scr"))
    assert width > 0 and height > 0


async def rfb_handshake(stream: DisplayStream) -> tuple[int, int, str]:
    """A VNC viewer's handshake (RFB 3.8, security None): the screen's width, height and name."""
    buffer = b""

    async def take(count: int) -> bytes:
        nonlocal buffer
        while len(buffer) < count:
            chunk = await stream.read()
            assert chunk, f"the screen closed after {buffer!r}"
            buffer += chunk
        data, buffer = buffer[:count], buffer[count:]
        return data

    assert (await take(12)).startswith(b"RFB 003.")
    await stream.write(b"RFB 003.008\n")
    (count,) = struct.unpack(">B", await take(1))
    assert 1 in await take(count), "security type None"
    await stream.write(b"\x01")
    assert await take(4) == b"\0\0\0\0"
    await stream.write(b"\x01")  # shared
    width, height = struct.unpack(">HH", await take(4))
    await take(16)  # the pixel format
    (length,) = struct.unpack(">I", await take(4))
    return width, height, (await take(length)).decode()
