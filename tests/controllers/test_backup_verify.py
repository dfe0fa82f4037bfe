"""Backup verification on the simulator (issue 36): a verification asked for (the annotation
the API action and the policies' verify_schedule set) checks each disk's chain on the target;
a backup whose base the simulator was told to corrupt fails, with a warning Event, the
failures counter and the gauge the alert reads; a backup that failed verification is not a good
one for retention."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.conftest import eventually, make_plane
from tests.controllers.test_backups import CLOCK, take, world
from tests.test_metrics import scrape, value
from virtplane.bootstrap import ControlPlane
from virtplane.controllers.backup_policies import outcome
from virtplane.domain.backup_policies import Outcome
from virtplane.domain.resources import (
    VERIFY_REQUESTED,
    BackupPhase,
    VerificationResult,
    VirtualMachineBackup,
)
from virtplane.drivers.base import PoolRef
from virtplane.drivers.sim import SimCloud
from virtplane.store.store import Store


@pytest.fixture
async def plane(store: Store) -> AsyncIterator[ControlPlane]:
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02, clock=CLOCK, backup_mib_s=100)
    p = make_plane(store, sim=sim)
    await p.start()
    yield p
    await p.stop()


def ask(plane: ControlPlane, name: str, request: str) -> None:
    def annotate(backup: VirtualMachineBackup) -> None:
        backup.metadata.annotations[VERIFY_REQUESTED] = request

    plane.store.mutate(VirtualMachineBackup, name, annotate, status_only=True)


async def answered(plane: ControlPlane, name: str, request: str) -> VirtualMachineBackup:
    def done() -> VirtualMachineBackup | None:
        found = plane.store.get(VirtualMachineBackup, name)
        check = found.status.verification
        return found if check is not None and check.requested == request and check.result else None

    answer: VirtualMachineBackup = await eventually(done)
    return answer


async def test_a_chain_verifies_until_its_base_is_corrupted(plane: ControlPlane) -> None:
    assert plane.sim is not None
    await world(plane)
    full = await take(plane, "b1")
    incremental = await take(plane, "b2")
    assert (full.status.phase, incremental.status.phase) == (BackupPhase.SUCCEEDED, BackupPhase.SUCCEEDED)
    transport = httpx.ASGITransport(app=plane.app())  # the real app's action, as the CLI calls it
    token = plane.store.create_token("verifier", "operator")
    async with httpx.AsyncClient(transport=transport, base_url="http://virtplane") as client:
        response = await client.post("/v1/backups/b2/verify", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 202, response.text
    requested = response.json()["requested"]
    assert requested.startswith("verifier@")
    good = await answered(plane, "b2", requested)
    assert good.status.verification is not None
    assert good.status.verification.result is VerificationResult.OK, good.status.verification
    assert good.status.verification.message.startswith("2 file(s) of 1 disk(s) checked")
    assert outcome(good) is Outcome.GOOD

    with plane.sim.transaction:  # a fault: the full backup's file is damaged on the target
        target = PoolRef(name="backups-t", path="/srv/b", shared=True, capacity_gib=100)
        plane.sim.backups.corrupt("h1", target, full.status.disks[0].backup_volume)
    ask(plane, "b2", "r2")
    bad = await answered(plane, "b2", "r2")
    assert bad.status.verification is not None
    assert bad.status.verification.result is VerificationResult.FAILED
    assert bad.status.verification.message == (
        f"{full.status.disks[0].backup_volume}: the image check found corrupt clusters"
    )
    assert outcome(bad) is Outcome.FAILED, "retention does not count it as good"
    [event] = [
        e
        for e in plane.store.list_events(kind="VirtualMachineBackup", name="b2")
        if e.reason == "VerifyFailed"
    ]
    assert event.type.value == "Warning"
    samples = await scrape(plane)
    assert value(samples, "virtplane_backup_verify_failures_total", vm="a") == 1.0
    assert value(samples, "virtplane_backup_verification_failed", vm="a", backup="b2") == 1.0
    assert value(samples, "virtplane_backup_last_written_bytes", vm="a") == incremental.status.total_bytes
    assert incremental.status.finished_at is not None
    ended = value(samples, "virtplane_backup_last_success_timestamp_seconds", vm="a")
    assert ended == incremental.status.finished_at.timestamp()


async def test_a_verification_asked_while_the_control_plane_was_down_is_answered_after_its_start(
    store: Store,
) -> None:
    sim = SimCloud(boot_seconds=0.02, shutdown_seconds=0.02, clock=CLOCK, backup_mib_s=100)
    first = make_plane(store, sim=sim)
    await first.start()
    await world(first)
    await take(first, "b1")
    await first.stop()
    ask(first, "b1", "while-down")  # the annotation lands in the store; nobody watches
    second = make_plane(store, sim=sim)
    await second.start()
    try:
        done = await answered(second, "b1", "while-down")
        assert done.status.verification is not None
        assert done.status.verification.result is VerificationResult.OK
    finally:
        await second.stop()
