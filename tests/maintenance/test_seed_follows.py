"""A local-storage VM's NoCloud seed follows it through a migration with its disks (issue 14):
the target gets a copy before the move, the source's copy goes once the VM has arrived, and
the VM's record of its seed files (``virtplane.io/seed-volumes``) names each file before it
is written and keeps it until it is deleted (DESIGN.md §1), so deleting the VM later deletes
the copy it now uses.
"""

from __future__ import annotations

from tests.conftest import eventually
from tests.maintenance.conftest import Cluster
from virtplane.domain.networks import CloudInit
from virtplane.domain.resources import VirtualMachine
from virtplane.domain.seeds import SeedVolume, read_seed_volumes
from virtplane.drivers.sim import SimFaultError


def seed_on(cluster: Cluster, host: str, file: str) -> bool:
    try:
        cluster.sim.read_volume(f"sim://local/{file}", host=host)
    except SimFaultError:
        return False
    return True


async def test_the_seed_moves_with_a_local_vm_and_the_source_copy_goes(cluster: Cluster) -> None:
    await cluster.add_host("h1")
    await cluster.add_vm("l", pool="h1-local", cloud_init=CloudInit(user_data="#cloud-config\n"))
    [placed] = read_seed_volumes(cluster.vm("l").metadata.annotations)
    assert placed.pool == "h1-local" and seed_on(cluster, "h1", placed.file)
    await cluster.add_host("h2")

    cluster.request("h1", "Migration")
    await cluster.wait_state("h1", "Maintenance")
    await eventually(lambda: cluster.settled("l", "h2"))
    moved = SeedVolume("h2-local", placed.file)
    assert seed_on(cluster, "h2", placed.file), "QEMU on the target opens the CD-ROM at the same path"
    await eventually(lambda: not seed_on(cluster, "h1", placed.file))
    await eventually(lambda: read_seed_volumes(cluster.vm("l").metadata.annotations) == [moved])

    cluster.store.delete(VirtualMachine, "l")
    await eventually(lambda: cluster.store.find(VirtualMachine, "l") is None)
    assert not seed_on(cluster, "h2", placed.file)
