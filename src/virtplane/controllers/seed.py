"""A VM's NoCloud seed, from its spec and the addresses its NICs hold.

The documents are ``domain.cloudinit``'s; this module only gathers their inputs from
the store's objects. The digest of the documents is what tells the VM controller to
rebuild the seed image when the spec (or a network's gateway or DNS) changes.
"""

from __future__ import annotations

from collections.abc import Callable

from virtplane.controllers.context import ControllerContext
from virtplane.controllers.storage import pool_driver, pool_ref
from virtplane.domain.cloudinit import SeedNic, seed_digest, seed_documents
from virtplane.domain.networks import Network
from virtplane.domain.pools import pool_driver_name
from virtplane.domain.resources import PoolKind, StoragePool, VirtualMachine
from virtplane.domain.seeds import SeedVolume, read_seed_volumes, write_seed_volumes
from virtplane.drivers.base import HypervisorDriver
from virtplane.drivers.errors import PermanentError
from virtplane.runtime.cache import Cache
from virtplane.seed_iso import build_seed_iso

__all__ = [
    "SeedImage",
    "delete_seeds",
    "place_seed",
    "place_seed_on_target",
    "record_seed",
    "seed_pool",
    "seed_volume",
    "seed_volume_on_target",
    "strike_seeds",
    "vm_seed",
]


class SeedImage:
    """The seed of one VM: its documents, their digest, and the ISO built on demand."""

    def __init__(self, documents: dict[str, bytes]) -> None:
        self.documents = documents
        self.digest = seed_digest(documents)

    def iso(self) -> bytes:
        return build_seed_iso(self.documents)

    @property
    def file_name(self) -> str:
        """The seed's file in the VM's pool: a new name per content, so a running guest's CD-ROM
        is never rewritten under it."""
        return f"vp-seed-{self.digest}.iso"


def vm_seed(vm: VirtualMachine, networks: dict[str, Network]) -> SeedImage | None:
    """The seed ``vm`` asks for (``spec.cloud_init``), or None."""
    cloud = vm.spec.cloud_init
    if cloud is None:
        return None
    nics = []
    for nic in vm.spec.nics:
        network = networks.get(nic.network)
        spec = network.spec if network else None
        subnet = spec.subnet if spec else None
        nics.append(
            SeedNic(
                mac=nic.mac or "",
                ip=str(nic.ip) if nic.ip and subnet else None,
                prefix_length=subnet.prefixlen if subnet and nic.ip else None,
                gateway=str(spec.gateway) if spec and spec.gateway else None,
                dns_servers=tuple(str(d) for d in spec.dns_servers) if spec else (),
            )
        )
    return SeedImage(
        seed_documents(
            instance_id=vm.metadata.uid,
            hostname=vm.metadata.name,
            user_data=cloud.user_data,
            ssh_authorized_keys=list(cloud.ssh_authorized_keys),
            nics=nics,
            network_override=cloud.network_config,
        )
    )


def seed_pool(cache: Cache, vm: VirtualMachine) -> StoragePool | None:
    """Where the seed is kept: the pool of the VM's first disk (in boot order), which every host
    that may run the VM sees."""
    ordered = sorted(enumerate(vm.spec.disks), key=lambda p: p[1].boot_order or 1000 + p[0])
    for _, disk in ordered:
        volume = cache.volume(disk.volume)
        pool = cache.pool(volume.spec.pool) if volume else None
        if pool is not None:
            return pool
    return None


def seed_volume(cache: Cache, vm: VirtualMachine) -> SeedVolume | None:
    """Where ``place_seed`` writes the VM's seed, or None when it asks for none (or has no pool)."""
    seed = vm_seed(vm, {n.metadata.name: n for n in cache.networks()})
    pool = seed_pool(cache, vm)
    if seed is None or pool is None:
        return None
    return SeedVolume(pool.metadata.name, seed.file_name)


async def delete_seeds(ctx: ControllerContext, volumes: list[SeedVolume]) -> list[SeedVolume]:
    """Delete seed files through a host that sees their pool; returns the ones that are gone (a
    pool that no longer exists took its files with it). One whose pool no host can reach now
    stays, for a later call."""
    gone = []
    for volume in volumes:
        pool = ctx.cache.pool(volume.pool)
        if pool is not None:
            driver = await pool_driver(ctx, pool)
            if driver is None:
                continue
            await driver.delete_volume(pool_ref(pool), volume.file)
        gone.append(volume)
    return gone


async def place_seed(cache: Cache, vm: VirtualMachine, driver: HypervisorDriver) -> str | None:
    """Put ``vm``'s seed on the driver's host, as a volume sent through the driver (remote hosts
    too), and return its path there; None when the VM asks for none. Called before a define,
    while the domain is off."""
    seed = vm_seed(vm, {n.metadata.name: n for n in cache.networks()})
    if seed is None:
        return None
    pool = seed_pool(cache, vm)
    if pool is None:
        raise PermanentError(
            "spec.cloud_init: the seed is kept in the pool of the VM's first disk; it has none"
        )
    return (await driver.upload_volume(pool_ref(pool), seed.file_name, seed.iso())).path


def seed_volume_on_target(
    cache: Cache, vm: VirtualMachine, target_pools: list[StoragePool]
) -> SeedVolume | None:
    """Where ``place_seed_on_target`` writes the VM's seed: the target's local pool (of
    ``target_pools``) that stands for the same pool on the host as the seed's own; None when
    the VM has no seed or keeps it in a shared pool."""
    current = seed_volume(cache, vm)
    pool = cache.pool(current.pool) if current else None
    if current is None or pool is None or pool.spec.kind is not PoolKind.LOCAL:
        return None
    same = (p for p in target_pools if pool_driver_name(p) == pool_driver_name(pool))
    target_pool = next(same, None)
    return SeedVolume(target_pool.metadata.name, current.file) if target_pool else None


async def place_seed_on_target(cache: Cache, vm: VirtualMachine, target: HypervisorDriver) -> None:
    """Before a migration that copies local disks: the seed, when it lives in a local pool, on the
    target too (QEMU there opens the CD-ROM at the same path). A shared pool's seed is there
    already, and in use by the running guest: it is never written again."""
    pool = seed_pool(cache, vm)
    if pool is not None and pool.spec.kind is PoolKind.LOCAL:
        await place_seed(cache, vm, target)


def record_seed(volume: SeedVolume) -> Callable[[VirtualMachine], None]:
    """A change that puts ``volume`` on a VM's seed record, made before the file is written."""

    def change(vm: VirtualMachine) -> None:
        recorded = read_seed_volumes(vm.metadata.annotations)
        if volume not in recorded:
            vm.metadata.annotations = write_seed_volumes(vm.metadata.annotations, [*recorded, volume])

    return change


def strike_seeds(gone: list[SeedVolume]) -> Callable[[VirtualMachine], None]:
    """A change that takes seed files whose deletion was confirmed off a VM's seed record."""

    def change(vm: VirtualMachine) -> None:
        recorded = read_seed_volumes(vm.metadata.annotations)
        vm.metadata.annotations = write_seed_volumes(
            vm.metadata.annotations, [seed for seed in recorded if seed not in gone]
        )

    return change
