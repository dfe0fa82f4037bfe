"""The domain a VM asks for, in the driver's terms."""

from __future__ import annotations

from virtplane.controllers.lookup import BootImages
from virtplane.domain.resources import VirtualMachine
from virtplane.drivers.base import DiskAttachment, DomainSpec, NicAttachment, domain_name


def build_domain_spec(
    vm: VirtualMachine,
    disks: list[DiskAttachment],
    console_dir: str | None = None,
    boot_images: BootImages = (None, None),
    nics: tuple[NicAttachment, ...] = (),
    seed: str | None = None,
) -> DomainSpec:
    boot = vm.spec.boot
    name = domain_name(vm.metadata.uid)
    return DomainSpec(
        name=name,
        vm_name=vm.metadata.name,
        vm_uid=vm.metadata.uid,
        cpu=vm.spec.cpu,
        memory_mib=vm.spec.memory_mib,
        disks=tuple(disks),
        kernel=boot_images[0],
        initrd=boot_images[1],
        cmdline=boot.cmdline if boot else "",
        console_log=f"{console_dir}/{name}.log" if console_dir else None,
        nics=nics,
        seed=seed,
    )


__all__ = ["build_domain_spec"]
