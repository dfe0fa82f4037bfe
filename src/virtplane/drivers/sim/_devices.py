"""Hot-plug on a simulated host, as libvirt and QEMU do it.

An attach is immediate, in the running instance and the persistent definition. A detach
leaves the definition at once and asks the guest, which lets the device go
``detach_seconds`` later (never, after an ``ignore-unplug`` fault, like a guest without a
hot-plug driver); until then ``live_devices`` still lists it. What QEMU refuses is
refused here too: a NIC on a bridge the host lacks, a disk on a pool it does not see,
any change to a domain with no running instance or one that is migrating.

Pending detaches are kept in memory, not in the state file: after a restart of the
process the guest has not let the device go, and the control plane's timeout says so.
"""

from __future__ import annotations

from dataclasses import replace

from virtplane.drivers.base import DiskAttachment, DomainSpec, DomainState, LiveDevices, NicAttachment
from virtplane.drivers.errors import NotRunning, PermanentError, TransientError

from ._host_record import HostRecord
from ._model import FaultKind, SimDomain

NEVER = float("inf")


class DeviceHotplug(HostRecord):
    _pending_unplugs: dict[str, tuple[int, dict[str, float]]]

    def _unplugs(self, name: str) -> dict[str, float]:
        """The devices (a disk's path, a NIC's MAC) the running instance of ``name`` was asked to
        release, with when its guest will have done so; a new instance (another boot) has none."""
        if "_pending_unplugs" not in self.__dict__:
            self._pending_unplugs = {}
        domain = self.domains.get(name)
        boots = domain.boots if domain is not None else -1
        instance, pending = self._pending_unplugs.get(name, (boots, {}))
        if instance != boots:
            pending = {}
        self._pending_unplugs[name] = (boots, pending)
        return pending

    def _settle(self, domain: SimDomain) -> None:
        """Let go of the devices whose release is due."""
        pending = self._unplugs(domain.name)
        now = self._ports.timing.clock()
        done = {key for key, due in pending.items() if due <= now}
        if not done or domain.live is None:
            return
        for key in done:
            del pending[key]
        domain.live = _without(domain.live, done)

    def _changeable(self, name: str, action: str) -> SimDomain:
        domain = self.get(name)
        if not domain.active or domain.live is None:
            raise NotRunning(f"domain {name} is not running: cannot {action}")
        if domain.state is DomainState.MIGRATING:
            raise TransientError(f"domain {name} is migrating: cannot {action} now")
        if domain.state in (DomainState.STARTING, DomainState.SHUTTING_DOWN):
            raise TransientError(f"domain {name} is {domain.state}: cannot {action} now")
        self._settle(domain)
        return domain

    def live_devices(self, name: str) -> LiveDevices | None:
        domain = self.domains.get(name)
        if domain is None or not domain.active or domain.live is None:
            return None
        self._settle(domain)
        live = domain.live
        return LiveDevices(tuple(d.path for d in live.disks), tuple(n.mac for n in live.nics))

    def attach_disk(self, name: str, disk: DiskAttachment, visible: bool) -> None:
        domain = self._changeable(name, "attach a disk")
        assert domain.live is not None
        if any(d.path == disk.path for d in domain.live.disks):
            return
        if disk.path in self._unplugs(name):
            raise TransientError(f"disk {disk.path} of {name} is being detached; attach it once it is gone")
        if not visible:  # as QEMU, which cannot open a file the host does not see
            raise PermanentError(f"disk {disk.path}: no such file on host {self.name}")
        attached = replace(disk, boot_order=None)
        domain.live = replace(domain.live, disks=(*domain.live.disks, attached))
        if not any(d.path == disk.path for d in domain.spec.disks):
            domain.spec = replace(domain.spec, disks=(*domain.spec.disks, attached))

    def attach_nic(self, name: str, nic: NicAttachment) -> None:
        domain = self._changeable(name, "attach a NIC")
        assert domain.live is not None
        if any(n.mac == nic.mac for n in domain.live.nics):
            return
        if nic.mac in self._unplugs(name):
            raise TransientError(f"NIC {nic.mac} of {name} is being detached; attach it once it is gone")
        if nic.bridge is not None and nic.bridge not in self.bridges:
            raise PermanentError(f"network {nic.network}: bridge {nic.bridge} is not on host {self.name}")
        domain.live = replace(domain.live, nics=(*domain.live.nics, nic))
        if not any(n.mac == nic.mac for n in domain.spec.nics):
            domain.spec = replace(domain.spec, nics=(*domain.spec.nics, nic))

    def detach(self, name: str, key: str) -> None:
        """Ask the guest to release the disk (by path) or NIC (by MAC) ``key``."""
        domain = self._changeable(name, "detach a device")
        assert domain.live is not None
        domain.spec = _without(domain.spec, {key})
        pending = self._unplugs(name)
        if key not in _keys(domain.live) or key in pending:
            return
        ignored = self.take_fault(FaultKind.IGNORE_UNPLUG, name)
        pending[key] = NEVER if ignored else self._ports.timing.clock() + self._ports.timing.detach_seconds

    def change_seed(self, name: str, path: str) -> None:
        domain = self._changeable(name, "change the seed's media")
        assert domain.live is not None
        if domain.live.seed is not None:
            domain.live = replace(domain.live, seed=path)
        if domain.spec.seed is not None:
            domain.spec = replace(domain.spec, seed=path)


def _keys(spec: DomainSpec) -> set[str]:
    return {d.path for d in spec.disks} | {n.mac for n in spec.nics}


def _without(spec: DomainSpec, keys: set[str]) -> DomainSpec:
    return replace(
        spec,
        disks=tuple(d for d in spec.disks if d.path not in keys),
        nics=tuple(n for n in spec.nics if n.mac not in keys),
    )


__all__ = ["DeviceHotplug"]
