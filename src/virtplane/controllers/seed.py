"""A VM's NoCloud seed, from its spec and the addresses its NICs hold.

The documents are ``domain.cloudinit``'s; this module only gathers their inputs from
the store's objects. The digest of the documents is what tells the VM controller to
rebuild the seed image when the spec (or a network's gateway or DNS) changes.
"""

from __future__ import annotations

from virtplane.domain.cloudinit import SeedNic, seed_digest, seed_documents
from virtplane.domain.networks import Network
from virtplane.domain.resources import VirtualMachine
from virtplane.seed_iso import build_seed_iso

__all__ = ["SeedImage", "vm_seed"]


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
