"""The pure rules of a restore from a backup (``domain.backup_restore``): the chain it reads,
why one is refused, and what may not be deleted while it reads."""

from __future__ import annotations

from virtplane.domain.backup_restore import backup_chain, read_by, restore_refusal
from virtplane.domain.resources import (
    BackupDisk,
    BackupPhase,
    CapturedVM,
    Metadata,
    OperationPhase,
    OperationType,
    RestoreSpec,
    VirtualMachineBackup,
    VirtualMachineBackupSpec,
    VirtualMachineBackupStatus,
    VirtualMachineOperation,
    VirtualMachineOperationSpec,
    VirtualMachineSpec,
)


def point(
    name: str, base: str | None = None, phase: BackupPhase = BackupPhase.SUCCEEDED
) -> VirtualMachineBackup:
    return VirtualMachineBackup(
        metadata=Metadata(name=name),
        spec=VirtualMachineBackupSpec(vm="a", target="t"),
        status=VirtualMachineBackupStatus(
            phase=phase, base=base, captured=CapturedVM(spec=VirtualMachineSpec()),
            disks=[BackupDisk(volume="a-root", backup_volume=f"{name}.qcow2")],
        ),
    )  # fmt: skip


CHAIN = {b.metadata.name: b for b in (point("full"), point("inc-1", "full"), point("inc-2", "inc-1"))}


def test_a_point_reads_its_chain_down_to_the_full_backup() -> None:
    assert [b.metadata.name for b in backup_chain(CHAIN["inc-2"], CHAIN.get)] == ["inc-2", "inc-1", "full"]
    assert restore_refusal("a", "inc-2", ["a-root"], CHAIN.get) is None
    looped = {"x": point("x", "y"), "y": point("y", "x")}
    refused = restore_refusal("a", "x", [], looped.get)
    assert refused is not None and refused.reason == "BackupChainBroken"


def test_a_backup_read_by_a_restore_not_finished_is_kept() -> None:
    def restore(phase: OperationPhase) -> VirtualMachineOperation:
        op = VirtualMachineOperation(
            metadata=Metadata(name=f"r-{phase.value.lower()}"),
            spec=VirtualMachineOperationSpec(
                vm="a", type=OperationType.RESTORE, restore=RestoreSpec(backup="inc-2")
            ),
        )
        op.status.phase = phase
        return op

    refused = read_by("inc-2", [restore(OperationPhase.IN_PROGRESS), restore(OperationPhase.COMPLETED)], [])
    assert refused is not None and refused.message == (
        "backup inc-2 is being read by restore r-inprogress; wait for it to end"
    )
    assert read_by("inc-2", [restore(OperationPhase.COMPLETED)], []) is None
    assert read_by("inc-1", [restore(OperationPhase.IN_PROGRESS)], []) is None, "inc-1 is kept as a base"
