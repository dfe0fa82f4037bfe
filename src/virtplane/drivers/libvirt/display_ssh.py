"""A domain's screen on a host reached over ``qemu+ssh``: its VNC server's UNIX socket, through
the same SSH transport libvirt uses.

libvirt cannot pass a descriptor over ssh (``display``), so on such a host the domain's VNC
server listens on a UNIX socket that libvirt places in the domain's private directory
(``<listen type='socket'/>``; never a TCP port). The control plane reads its path from the
live definition and runs ``ssh ... nc -U PATH``, built from the host's URI as libvirt builds its
own connection (``virNetSocketNewConnectSSH``): the same ``command`` (ssh), user, port,
``keyfile``, ``no_verify`` and ``netcat``, in batch mode, so the same keys and known_hosts
are checked and nothing new is opened on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, urlsplit

from virtplane.drivers.errors import HostUnreachable, NotRunning, Unsupported
from virtplane.drivers.libvirt.domain import LibvirtDomain

__all__ = ["SshDisplay", "is_ssh", "open_over_ssh", "ssh_argv", "vnc_socket"]

CHUNK = 64 * 1024
GREETING_TIMEOUT_S = 30.0
"""How long ssh and the VNC server may take to say ``RFB ...`` before the screen is refused."""


def is_ssh(uri: str) -> bool:
    return urlsplit(uri).scheme.partition("+")[2] in ("ssh", "libssh", "libssh2")


def ssh_argv(uri: str, socket_path: str) -> list[str]:
    """The command that connects this process's stdin and stdout to ``socket_path`` on the host
    of ``uri``, with the URI's own ssh options."""
    parts = urlsplit(uri)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    argv = [query.get("command", "ssh")]
    if parts.port:
        argv += ["-p", str(parts.port)]
    if parts.username:
        argv += ["-l", parts.username]
    if query.get("keyfile"):
        argv += ["-i", query["keyfile"]]
    if query.get("no_verify") == "1":
        argv += ["-o", "StrictHostKeyChecking=no"]
    argv += ["-T", "-e", "none", "-o", "BatchMode=yes", "--", parts.hostname or "localhost"]
    netcat = query.get("netcat", "nc")
    return [*argv, f"{shlex.quote(netcat)} -U {shlex.quote(socket_path)}"]


def vnc_socket(dom: LibvirtDomain) -> str:
    """The path of the running domain's VNC socket (blocking: run it in the executor)."""
    if not dom.is_active():
        raise NotRunning(f"domain {dom.name} is not running: a screen needs a live guest")
    listen = ET.fromstring(dom.xml()).find("devices/graphics[@type='vnc']/listen[@type='socket']")
    path = listen.get("socket", "") if listen is not None else ""
    if not path:
        raise Unsupported(
            f"domain {dom.name} has no VNC socket (it was started before its host was reached over "
            "ssh, or elsewhere): its screen shows after its next start"
        )
    return path


class SshDisplay:
    """One connection to a domain's VNC server (a ``DisplayStream``) over ssh's stdin and stdout."""

    def __init__(self, process: asyncio.subprocess.Process, greeting: bytes) -> None:
        self._process = process
        self._pending = greeting

    async def read(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        assert self._process.stdout is not None
        try:
            return await self._process.stdout.read(CHUNK)
        except OSError:
            return b""

    async def write(self, data: bytes) -> None:
        stdin = self._process.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(OSError):
            stdin.write(data)
            await stdin.drain()

    async def close(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
        await self._process.wait()


async def open_over_ssh(uri: str, socket_path: str) -> SshDisplay:
    """A connection to the VNC server at ``socket_path`` on the host of ``uri``, once it greets."""
    try:
        process = await asyncio.create_subprocess_exec(
            *ssh_argv(uri, socket_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise HostUnreachable(f"cannot run ssh for the screen: {exc}") from exc
    assert process.stdout is not None and process.stderr is not None
    try:
        greeting = await asyncio.wait_for(process.stdout.read(CHUNK), GREETING_TIMEOUT_S)
    except TimeoutError:
        greeting = b""
    if not greeting.startswith(b"RFB "):
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        error = (await process.stderr.read()).decode(errors="replace").strip().splitlines()[-1:]
        await process.wait()
        why = error[0] if error else "no VNC greeting"
        raise HostUnreachable(f"the screen's connection over ssh failed: {why}")
    return SshDisplay(process, greeting)
