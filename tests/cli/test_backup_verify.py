"""``virtplane backup verify NAME --wait`` beside the store's ``virtplane backup -o FILE``, and
backup policies through the generic commands (apply -f, get, describe)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LiveServer, eventually_sync
from virtplane.domain.resources import BackupPhase, BackupPolicy, VirtualMachineBackup
from virtplane.drivers.base import PoolRef

from .conftest import Invoke
from .test_vm_backup import world  # noqa: F401  (autouse: node-1 runs run-1, target nightly)


def succeeded(invoke: Invoke, server: LiveServer, name: str) -> VirtualMachineBackup:
    assert invoke("vm", "backup", "run-1", "--target", "nightly", "--name", name, "--wait").exit_code == 0
    backup = server.store.get(VirtualMachineBackup, name)
    assert backup.status.phase is BackupPhase.SUCCEEDED
    return backup


def test_backup_verify_waits_for_its_answer(invoke: Invoke, server: LiveServer) -> None:
    succeeded(invoke, server, "b1")
    result = invoke("backup", "verify", "b1", "--wait")
    assert result.exit_code == 0, result.output
    assert (
        result.stdout.splitlines()[-1]
        == "backup/b1 verified: 1 file(s) of 1 disk(s) checked, each disk read whole"
    )


def test_a_backup_that_fails_verification_exits_1_with_what_was_found(
    invoke: Invoke, server: LiveServer
) -> None:
    backup = succeeded(invoke, server, "b1")
    sim = server.plane.sim
    assert sim is not None

    def corrupt() -> None:
        with sim.transaction:
            sim.backups.corrupt(
                "node-1", PoolRef("backups-nightly", "/srv/b", True, 10), backup.status.disks[0].backup_volume
            )

    server.in_loop(corrupt)
    result = invoke("backup", "verify", "b1", "--wait")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error (VerifyFailed): backup/b1 failed verification: "), result.stderr
    assert "the image check found corrupt clusters" in result.stderr


def test_the_store_backup_still_needs_its_file(invoke: Invoke) -> None:
    result = invoke("backup")
    assert result.exit_code == 2 and "--output FILE" in result.output


def test_a_policy_is_applied_listed_and_described(invoke: Invoke, server: LiveServer, tmp_path: Path) -> None:
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(
        "apiVersion: virtplane.io/v1\n"
        "kind: BackupPolicy\n"
        "metadata: {name: nightly}\n"
        "spec:\n"
        "  target: nightly\n"
        "  schedule: '0 2 * * *'\n"
        "  selector: ''\n"
        "  retention: {keep_last: 3, keep_daily: 7}\n"
    )
    applied = invoke("apply", "-f", str(manifest))
    assert applied.exit_code == 0, applied.output
    eventually_sync(lambda: server.store.get(BackupPolicy, "nightly").status.next_run is not None)
    listed = invoke("get", "backuppolicies")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.split("\n")[0].split() == [
        "NAME",
        "TARGET",
        "SCHEDULE",
        "SELECTOR",
        "LAST",
        "RUN",
        "NEXT",
        "RUN",
        "MISSED",
        "BACKUPS",
    ]
    assert "0 2 * * *" in listed.stdout
    described = invoke("describe", "bp", "nightly")
    assert described.exit_code == 0, described.output
    assert "next_run" in described.stdout and "keep_daily" in described.stdout
