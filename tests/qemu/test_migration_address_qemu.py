"""The target Host's ``spec.migration_address`` is where a live migration's data goes, on the
rig's two real libvirt daemons: the control plane passes it to libvirt (``migrateToURI3``'s
migrate URI and the destination's listen address), so an address no interface of the machine
has makes the migration fail, naming the address, with the guest still running where it was,
and the right one (loopback) makes it succeed. No packet leaves the machine: the destination
QEMU cannot listen on an address it does not have, so the source never connects anywhere.

Without the address, libvirt would use the destination's host name, which on the rig (both
daemons on this machine) works: a coordinator that dropped the address would let the first
migration succeed.
"""

from __future__ import annotations

import pytest

from virtplane.domain.resources import Host, MigrateSpec, OperationPhase, OperationType, RunPolicy, VMPhase

from .conftest import console_shows
from .plane import QemuPlane

pytestmark = [pytest.mark.qemu, pytest.mark.slow]

NOWHERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): documentation only, on no interface here


async def test_a_migration_goes_to_the_target_hosts_migration_address(qplane: QemuPlane) -> None:
    await qplane.add_host("a")
    await qplane.add_volume("mv-root")
    qplane.add_vm("mv", RunPolicy.ALWAYS_ON, "mv-root")
    await qplane.wait_settled("mv", VMPhase.RUNNING)
    await console_shows(qplane.rig, qplane.domain("mv"), "GUEST-UP")
    assert qplane.vm("mv").status.host == "a"
    await qplane.add_host("b", migration_address=NOWHERE)

    failed = await qplane.finished("mv", OperationType.MIGRATE, migrate=MigrateSpec(target_host="b"))
    assert failed.status.phase is OperationPhase.FAILED, failed.status.message
    assert NOWHERE in failed.status.message
    current = await qplane.wait_settled("mv", VMPhase.RUNNING)
    assert current.status.host == "a" and await qplane.runs_on("mv") == ["a"]

    def loopback(host: Host) -> None:
        host.spec.migration_address = "127.0.0.1"

    qplane.store.mutate(Host, "b", loopback)
    await qplane.operate("mv", OperationType.MIGRATE, migrate=MigrateSpec(target_host="b"))
    current = await qplane.wait_settled("mv", VMPhase.RUNNING)
    assert current.status.host == "b" and await qplane.runs_on("mv") == ["b"]
    log = qplane.console("mv")
    assert log.count("GUEST-UP") == 1, "the same boot, moved live"
