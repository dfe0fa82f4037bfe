"""The domain a VM asks for, in the driver's terms."""

from __future__ import annotations

from virtplane.controllers.lookup import BootImages
from virtplane.domain.resources import CpuMode, HostCPU, VirtualMachine
from virtplane.drivers.base import DiskAttachment, DomainSpec, ImageRef, NicAttachment, domain_name


def build_domain_spec(
    vm: VirtualMachine,
    disks: list[DiskAttachment],
    console_dir: str | None = None,
    boot_images: BootImages = (None, None),
    nics: tuple[NicAttachment, ...] = (),
    seed: str | None = None,
    cluster_cpu: HostCPU | None = None,
    cdrom: ImageRef | None = None,
) -> DomainSpec:
    """``cluster_cpu``: the CPU model of the host's cluster (its status), for cluster-mode VMs."""
    boot = vm.spec.boot
    passthrough = vm.spec.cpu_mode is CpuMode.HOST_PASSTHROUGH
    model = None if passthrough else cluster_cpu
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
        cpu_passthrough=passthrough,
        cpu_model=model.model if model else "",
        cpu_features=tuple(model.features) if model else (),
        cpu_disabled=tuple(model.disabled) if model else (),
        cdrom=cdrom,
    )


__all__ = ["build_domain_spec"]
