"""Memory snapshots: libvirt save images of running domains.

A save stops the domain; restoring the image at once keeps it running (or paused) as it
was, so the guest sees a short stall. The images live in ``state_dir`` on the host (a
directory pool named by ``state_pool_name``); point ``state_dir`` at a shared directory to
restore them on another host. libvirt's test driver runs in this process and writes its
images to this machine, into ``state_dir`` or a temporary directory of the driver's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import xml.etree.ElementTree as ET
from typing import Any

from virtplane.drivers.base import PoolRef
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt import _libvirt, storage
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.domain_xml import GUEST_AGENT_CHANNEL, agent_channel_state
from virtplane.drivers.libvirt.flavor import HypervisorFlavor

STATE_POOL = "virtplane-state"
DEFAULT_STATE_DIR = "/var/lib/libvirt/virtplane/state"


def with_saved_cpu_check(definition: str, saved: str) -> str:
    """``definition`` with its ``<cpu check=...>`` as the image has it. libvirt fills the check
    in when a domain starts (``full`` for a custom model) and refuses a restore whose
    definition asks for another ("Target CPU check none does not match source full"); the
    model and features, which must match, stay as the definition says."""
    saved_cpu = ET.fromstring(saved).find("cpu")
    domain = ET.fromstring(definition)
    cpu = domain.find("cpu")
    if saved_cpu is None or cpu is None or saved_cpu.get("check") is None:
        return definition
    cpu.set("check", saved_cpu.get("check", ""))
    return ET.tostring(domain, encoding="unicode")


def with_saved_agent_channel(definition: str, saved: str) -> str:
    """``definition`` without the guest agent's channel when the image has none (saved by a
    release before the channel): QEMU cannot load a memory state into other devices."""
    if agent_channel_state(saved) is not None:
        return definition
    domain = ET.fromstring(definition)
    devices = domain.find("devices")
    channels = [] if devices is None else devices.findall("channel")
    dropped = [
        c for c in channels if (t := c.find("target")) is not None and t.get("name") == GUEST_AGENT_CHANNEL
    ]
    if devices is None or not dropped:
        return definition
    for channel in dropped:
        devices.remove(channel)
    return ET.tostring(domain, encoding="unicode")


def state_pool_name(state_dir: str) -> str:
    """The libvirt pool holding memory images in ``state_dir``.

    A pool's name fixes its path, so two drivers with different state
    directories on one libvirt daemon need different names; the default
    directory keeps the plain name.
    """
    if os.path.normpath(state_dir) == DEFAULT_STATE_DIR:
        return STATE_POOL
    digest = hashlib.sha256(os.path.normpath(state_dir).encode()).hexdigest()[:12]
    return f"{STATE_POOL}-{digest}"


class MemoryImages:
    """The memory images of one driver's host. Blocking; takes an open virConnect."""

    def __init__(self, flavor: HypervisorFlavor, state_dir: str | None) -> None:
        self._flavor = flavor
        self._state_dir = state_dir
        self._own_dir: str | None = None
        self._saving: set[str] = set()  # domains stopped only for the instant of a save
        self._lock = threading.Lock()

    def saving(self, name: str) -> bool:
        """Whether ``name`` is off only for the instant of a save (it is running, for the caller)."""
        with self._lock:
            return name in self._saving

    def save(self, conn: Any, dom: LibvirtDomain, snapshot_id: str) -> str:
        """Save the memory of the running ``dom`` and let it go on; returns the image's path."""
        lv = _libvirt.load()
        name = dom.name
        if not dom.is_active():
            raise PermanentError(f"domain {name} is not running: no memory to save")
        path = os.path.join(self._directory(conn), f"{name}.{snapshot_id}.mem")
        was_paused = dom.state()[0] == lv.VIR_DOMAIN_PAUSED
        keep_paused = was_paused and self._flavor.restore_run_state
        with self._lock:
            self._saving.add(name)
        try:
            dom.save(path, paused=keep_paused)
            conn.restoreFlags(path, None, lv.VIR_DOMAIN_SAVE_PAUSED if keep_paused else 0)
            if was_paused and not self._flavor.restore_run_state:
                dom.suspend()  # the hypervisor cannot restore paused: pause it again
        finally:
            with self._lock:
                self._saving.discard(name)
        if self._flavor.memory_on_host:
            self._state_pool(conn).refresh(0)
        return path

    def restore(self, conn: Any, path: str, definition: str | None) -> None:
        """Start a domain from the image at ``path`` (``definition``: its XML to use instead),
        running, also when the image was saved from a guest paused for the snapshot."""
        running = _libvirt.load().VIR_DOMAIN_SAVE_RUNNING if self._flavor.restore_run_state else 0
        if definition is not None:
            saved = conn.saveImageGetXMLDesc(path, 0)
            definition = with_saved_agent_channel(with_saved_cpu_check(definition, saved), saved)
        conn.restoreFlags(path, definition, running)

    def delete_local(self, handle: str) -> bool:
        """Delete an image in the driver's own directory; False when ``handle`` is not one."""
        if self._own_dir is None or os.path.dirname(handle) != self._own_dir:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.remove(handle)
        return True

    def close(self) -> None:
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    def _directory(self, conn: Any) -> str:
        if self._flavor.memory_on_host:
            return storage.pool_path(self._state_pool(conn))
        if self._state_dir is not None:
            os.makedirs(self._state_dir, exist_ok=True)
            return self._state_dir
        if self._own_dir is None:
            self._own_dir = tempfile.mkdtemp(prefix="virtplane-libvirt-test-")
        return self._own_dir

    def _state_pool(self, conn: Any) -> Any:
        state_dir = self._state_dir or DEFAULT_STATE_DIR
        return storage.ensure_pool(conn, PoolRef(name=state_pool_name(state_dir), path=state_dir))


__all__ = ["DEFAULT_STATE_DIR", "STATE_POOL", "MemoryImages", "state_pool_name"]
