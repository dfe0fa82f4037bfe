"""The demo world: three simulated hosts with a bridge each, shared and local storage, an
image library, a bridge network and a user network, VMs of every run policy (each with a NIC
on the user network).

``seed`` adds only what is missing, so restarting ``serve --demo`` keeps the data;
``stock_library`` places the library's files on the simulated hosts, as an admin would.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING

from virtplane.domain.ipam import Claim
from virtplane.domain.networks import Network, NetworkKind, NetworkSpec, Nic, nic_claims
from virtplane.domain.resources import (
    Capacity,
    Disk,
    Host,
    HostSpec,
    Image,
    ImageKind,
    ImageSpec,
    Metadata,
    Placement,
    PoolContent,
    PoolKind,
    Resource,
    RunPolicy,
    StoragePool,
    StoragePoolSpec,
    VirtualMachine,
    VirtualMachineSpec,
    Volume,
    VolumeSource,
    VolumeSpec,
)
from virtplane.runtime.cache import Cache
from virtplane.services.networks import NetworkAdmission
from virtplane.store.errors import AlreadyExists
from virtplane.store.store import Store

if TYPE_CHECKING:
    from virtplane.drivers.sim import SimCloud

CLUSTER = "demo"
HOSTS = ("host-1", "host-2", "host-3")
BRIDGES = ("br0",)
USER_NETWORK = "user"
"""The network every demo VM has a NIC on (QEMU's user networking: no bridge needed)."""
"""The Linux bridges every simulated host of the demo has."""
LIBRARY = "images"
LIBRARY_FILES = {  # image name: (file, kind, content, GiB)
    "debian-12": ("debian-12-generic-amd64.qcow2", ImageKind.DISK, "Debian 12 (demo image)", 2),
    "vmlinuz-6-1": ("vmlinuz-6.1.0-amd64", ImageKind.KERNEL, "Linux 6.1 kernel (demo)", 1),
    "initrd-6-1": ("initrd.img-6.1.0-amd64", ImageKind.INITRD, "Linux 6.1 initrd (demo)", 1),
}


def demo_objects() -> list[Resource]:
    objects: list[Resource] = []
    for name in HOSTS:
        objects.append(
            Host(
                metadata=Metadata(name=name, labels={"rack": "r1"}),
                spec=HostSpec(
                    uri=f"sim://{name}", cluster=CLUSTER, capacity=Capacity(vcpus=16, memory_mib=32768)
                ),
            )
        )
        objects.append(
            StoragePool(
                metadata=Metadata(name=f"{name}-local"),
                spec=StoragePoolSpec(kind=PoolKind.LOCAL, host=name, capacity_gib=500, driver_pool="local"),
            )
        )
    objects.append(
        StoragePool(
            metadata=Metadata(name="shared"),
            spec=StoragePoolSpec(kind=PoolKind.SHARED, cluster=CLUSTER, capacity_gib=4000),
        )
    )
    objects.append(
        StoragePool(
            metadata=Metadata(name=LIBRARY),
            spec=StoragePoolSpec(
                kind=PoolKind.SHARED, cluster=CLUSTER, capacity_gib=100, content=PoolContent.IMAGES
            ),
        )
    )
    objects.append(
        Network(
            metadata=Metadata(name="lan"),
            spec=NetworkSpec(
                kind=NetworkKind.BRIDGE,
                bridge=BRIDGES[0],
                cluster=CLUSTER,
                subnet=IPv4Network("10.42.0.0/24"),
                gateway=IPv4Address("10.42.0.1"),
                dns_servers=[IPv4Address("10.42.0.1")],
            ),
        )
    )
    objects.append(
        Network(
            metadata=Metadata(name=USER_NETWORK), spec=NetworkSpec(kind=NetworkKind.USER, cluster=CLUSTER)
        )
    )
    for image, (file, kind, _, _) in LIBRARY_FILES.items():
        objects.append(
            Image(metadata=Metadata(name=image), spec=ImageSpec(pool=LIBRARY, file=file, kind=kind))
        )
    vms = [
        ("web-1", RunPolicy.ALWAYS_ON, "shared", 2, 2048, "web"),
        ("web-2", RunPolicy.ALWAYS_ON, "shared", 2, 2048, "web"),
        ("app-1", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "shared", 4, 4096, None),
        ("db-1", RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, "host-1-local", 4, 8192, None),
        ("batch-1", RunPolicy.MANUAL, "shared", 2, 1024, None),
        ("archive-1", RunPolicy.ALWAYS_OFF, "shared", 1, 512, None),
    ]
    for name, policy, pool, cpu, memory, group in vms:
        source = VolumeSource(image="debian-12") if group == "web" else None
        objects.append(
            Volume(
                metadata=Metadata(name=f"{name}-root"), spec=VolumeSpec(pool=pool, size_gib=20, source=source)
            )
        )
        objects.append(
            VirtualMachine(
                metadata=Metadata(name=name, labels={"app": name.split("-")[0]}),
                spec=VirtualMachineSpec(
                    run_policy=policy,
                    cpu=cpu,
                    memory_mib=memory,
                    disks=[Disk(volume=f"{name}-root", boot_order=1)],
                    nics=[Nic(network=USER_NETWORK)],
                    placement=Placement(anti_affinity_group=group),
                    termination_grace_period_s=10,
                ),
            )
        )
    return objects


def seed(store: Store) -> int:
    """Create the demo objects that do not exist yet; returns how many were created.

    A VM's NICs get their MACs as through the API: the same admission fills them in, and
    the VM is written with its claims on them."""
    nics = NetworkAdmission(store, Cache(store))  # (admitting NICs reads only the store)
    created = 0
    for obj in demo_objects():
        if store.find(type(obj), obj.metadata.name) is not None:
            continue
        claims: list[Claim] = []
        if isinstance(obj, VirtualMachine):
            nics.admit_nics(obj, None)
            claims = nic_claims(obj.spec.nics)
        try:
            store.create(obj, claims=claims)
            created += 1
        except AlreadyExists:
            pass
    return created


def stock_library(sim: SimCloud) -> None:
    """Put the demo library's files on the simulated hosts' shared library pool."""
    for file, _, content, size_gib in LIBRARY_FILES.values():
        sim.put_image_file(LIBRARY, file, content, size_gib=size_gib)


def guest_loads(sim: SimCloud, store: Store) -> None:
    """Give the demo VMs' simulated guests some work, so that their graphs and ``virtplane top``
    show something: each its own, steady (``virtplane sim load`` changes one)."""
    from virtplane.drivers.base import domain_name
    from virtplane.drivers.sim import SimLoad

    for obj in demo_objects():
        if not isinstance(obj, VirtualMachine):
            continue
        found = store.find(VirtualMachine, obj.metadata.name)
        if found is None:
            continue
        weight = (sum(map(ord, obj.metadata.name)) % 10) / 10  # 0.0-0.9, fixed per name
        sim.set_load(
            domain_name(found.metadata.uid),
            SimLoad(
                cpu=0.05 + 0.6 * weight,
                memory=0.3 + 0.5 * weight,
                disk_read_bps=weight * 2e6,
                disk_write_bps=(1 - weight) * 1e6,
                net_rx_bps=weight * 5e5,
                net_tx_bps=weight * 2e5,
            ),
        )
