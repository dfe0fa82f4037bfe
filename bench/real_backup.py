"""Rows 20-22: backups and restore of a real guest's disk on the rig (issue 36's figures), each
against a bound measured in the same run on the same files.

One guest (the rig's busybox test guest) with a 2 GiB qcow2 disk filled with a pattern, so that
every cluster holds data; a BackupTarget in the rig's shared directory.

- 20: an incremental backup after 5 % of the disk changed (written while the VM is stopped, on
  the same host: its checkpoint's dirty bitmap sees it) writes at most 10 % of the full size:
  the job's bytes over the full backup's.
- 21: the full backup of the running guest, from the backup's create until Succeeded, as a
  ratio to ``qemu-img convert`` of the same disk into a qcow2 beside it (target within 1.5x).
- 22: the restore of the stopped VM from the incremental point (its chain read through the
  full one), from the operation's create until Completed, as a ratio to ``qemu-img convert``
  of that chain's top into a new file (target within 1.5x).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import traceback
from pathlib import Path

from bench import real
from bench import real_bounds as rb
from bench.rows import Row, at_most
from bench.sizes import Sizes

ROWS = frozenset({20, 21, 22})
DISK_GIB = 2
CHANGED = 0.05
WRITTEN_TARGET = 0.10
BACKUP_TARGET = 1.5
RESTORE_TARGET = 1.5
CLUSTER = 64 * 1024
LIMIT_S = 600.0
TITLES = {
    20: ("Incremental backup after 5 % of a 2 GiB disk changed", "x the full backup's bytes", WRITTEN_TARGET),
    21: ("Full backup of a running real guest's 2 GiB disk", "x qemu-img convert of it", BACKUP_TARGET),
    22: (
        "Restore of a 2 GiB disk from an incremental backup",
        "x qemu-img convert of its chain",
        RESTORE_TARGET,
    ),
}


def _row(
    number: int,
    title: str,
    figure: float | None,
    unit: str,
    target: float,
    note: str,
    details: dict[str, object],
) -> Row:
    shown = None if figure is None else round(figure, 3)
    return Row(
        number, title, shown, unit, f"<= {target:g}", at_most(figure, target), details=details, note=note
    )


def none_rows(rows: frozenset[int], why: str) -> list[Row]:
    return [
        rb.not_measured(n, TITLES[n][0], TITLES[n][1], f"<= {TITLES[n][2]:g}", why)
        for n in sorted(rows & ROWS)
    ]


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    del ceiling, profile_dir  # bounds of their own, measured on the same files
    wanted = ROWS if sizes.selected is None else sizes.selected & ROWS
    problem = real.missing_prerequisites()
    if problem is not None:
        return none_rows(wanted, problem)
    from bench.real_rig import rig_session

    try:
        async with rig_session(work / "real-backups") as rig:
            rows = await _measure(rig)
    except Exception as exc:
        traceback.print_exc()
        return none_rows(wanted, f"{type(exc).__name__}: {exc}"[:300])
    return [row for row in rows if row.number in wanted]


def _qemu(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


async def _timed_convert(source: Path, into: Path, *, shared: bool) -> float:
    """``qemu-img convert`` of ``source`` (through its backing chain) into a new qcow2, in s."""
    into.unlink(missing_ok=True)
    started = time.monotonic()
    share = ["-U"] if shared else []  # read beside the running guest, as the backup job does
    await asyncio.to_thread(
        _qemu, "qemu-img", "convert", *share, "-f", "qcow2", "-O", "qcow2", str(source), str(into)
    )
    took = time.monotonic() - started
    into.unlink()
    return took


async def _measure(rig: object) -> list[Row]:
    from tests.qemu.plane import SHARED

    from bench.real_rig import RealRig, accelerator_used, console_count, control_plane, hosts_ready
    from virtplane.domain.resources import (
        BackupPhase,
        BackupTarget,
        BackupTargetSpec,
        Metadata,
        OperationType,
        RestoreMode,
        RestoreSpec,
        RunPolicy,
        VirtualMachineBackup,
        VirtualMachineBackupSpec,
        VMPhase,
        Volume,
        VolumePhase,
        VolumeSpec,
    )
    from virtplane.drivers.base import domain_name

    assert isinstance(rig, RealRig)
    async with control_plane(rig, "row20") as qplane:
        await hosts_ready(qplane, "a")
        accelerator = accelerator_used(qplane, "a")
        qplane.store.create(
            Volume(metadata=Metadata(name="bk-root"), spec=VolumeSpec(pool=SHARED, size_gib=DISK_GIB))
        )
        while qplane.store.get(Volume, "bk-root").status.phase is not VolumePhase.READY:
            await asyncio.sleep(0.05)
        disk = Path(qplane.store.get(Volume, "bk-root").status.path)
        half = f"{DISK_GIB * 512}M"
        await asyncio.to_thread(
            _qemu,
            "qemu-io",
            "-f",
            "qcow2",
            "-c",
            f"write -P 0x5a 0 {half}",
            "-c",
            f"write -P 0x5a {half} {half}",
            str(disk),
        )
        directory = rig.rig.base / "shared" / "bench-backups"
        qplane.store.create(
            BackupTarget(
                metadata=Metadata(name="bench-t"), spec=BackupTargetSpec(path=str(directory), capacity_gib=20)
            )
        )
        qplane.add_vm("bk", RunPolicy.MANUAL, "bk-root")
        await qplane.operate("bk", OperationType.START)
        await qplane.wait_settled("bk", VMPhase.RUNNING)
        log = rig.console_log(domain_name(qplane.vm("bk").metadata.uid))
        await console_count(log, "GUEST-UP")

        async def backed_up(name: str, full: bool = False) -> tuple[float, VirtualMachineBackup]:
            started = time.monotonic()
            qplane.store.create(
                VirtualMachineBackup(
                    metadata=Metadata(name=name),
                    spec=VirtualMachineBackupSpec(vm="bk", target="bench-t", full=full),
                )
            )
            while qplane.store.get(VirtualMachineBackup, name).status.phase not in (
                BackupPhase.SUCCEEDED,
                BackupPhase.FAILED,
            ):
                if time.monotonic() - started > LIMIT_S:
                    raise TimeoutError(f"backup {name} not finished after {LIMIT_S:.0f} s")
                await asyncio.sleep(0.02)
            took = time.monotonic() - started
            done = qplane.store.get(VirtualMachineBackup, name)
            if done.status.phase is not BackupPhase.SUCCEEDED:
                raise RuntimeError(f"backup {name}: {done.status.message}")
            return took, done

        first_s, full = await backed_up("bk-full")
        # libvirt 9.0 ends the first backup job begun soon after a domain's start 30 s late when
        # the domain has a guest-agent channel and no agent answers (benchmarks.md, row 21): a
        # nightly backup of a VM up for hours never meets it, so the row times a second full one
        full_s, full = await backed_up("bk-full-2", full=True)
        copy_s = await _timed_convert(disk, rig.work / "copy.qcow2", shared=True)

        await qplane.operate("bk", OperationType.STOP)
        await qplane.wait_settled("bk", VMPhase.STOPPED)
        changed = round(DISK_GIB * 1024**3 * CHANGED / CLUSTER) * CLUSTER
        await asyncio.to_thread(
            _qemu, "qemu-io", "-f", "qcow2", "-c", f"write -P 0xa5 {512 * 1024**2} {changed}", str(disk)
        )
        await qplane.operate("bk", OperationType.START)
        await qplane.wait_settled("bk", VMPhase.RUNNING)
        await console_count(log, "GUEST-UP", 2)
        inc_s, inc = await backed_up("bk-inc")
        top = directory / inc.status.disks[0].backup_volume
        if inc.status.mode is None or inc.status.mode.value != "Incremental":
            raise RuntimeError(f"the second backup is not incremental: {inc.status.mode_reason}")

        await qplane.operate("bk", OperationType.STOP)
        await qplane.wait_settled("bk", VMPhase.STOPPED)
        started = time.monotonic()
        await qplane.operate(
            "bk", OperationType.RESTORE, restore=RestoreSpec(backup="bk-inc", mode=RestoreMode.STRICT)
        )
        restore_s = time.monotonic() - started
        restore_bound_s = await _timed_convert(top, rig.work / "restored.qcow2", shared=False)

    full_bytes = full.status.total_bytes
    written = inc.status.total_bytes
    shared = {"accelerator": accelerator, "disk_gib": DISK_GIB}
    return [
        _row(
            20,
            TITLES[20][0],
            written / full_bytes if full_bytes else None,
            TITLES[20][1],
            WRITTEN_TARGET,
            f"{written / 2**20:.1f} MiB written after {changed / 2**20:.1f} MiB changed; full {full_bytes / 2**20:.0f} MiB; "
            f"incremental file {os.stat(top).st_blocks * 512 / 2**20:.1f} MiB on disk",
            {
                **shared,
                "incremental_bytes": written,
                "full_bytes": full_bytes,
                "changed_bytes": changed,
                "incremental_s": round(inc_s, 3),
            },
        ),
        _row(
            21,
            TITLES[21][0],
            rb.ratio(full_s, copy_s),
            TITLES[21][1],
            BACKUP_TARGET,
            f"ours {full_s:.2f} s ({full_bytes / 2**20 / full_s:.0f} MiB/s) against qemu-img convert {copy_s:.2f} s; "
            f"the first full backup after the domain's start {first_s:.2f} s (libvirt's 30 s tail)",
            {
                **shared,
                "backup_s": round(full_s, 3),
                "first_backup_s": round(first_s, 3),
                "convert_s": round(copy_s, 3),
            },
        ),
        _row(
            22,
            TITLES[22][0],
            rb.ratio(restore_s, restore_bound_s),
            TITLES[22][1],
            RESTORE_TARGET,
            f"ours {restore_s:.2f} s (the operation, VM stopped before and after) against qemu-img convert "
            f"of the chain {restore_bound_s:.2f} s",
            {**shared, "restore_s": round(restore_s, 3), "convert_s": round(restore_bound_s, 3)},
        ),
    ]
