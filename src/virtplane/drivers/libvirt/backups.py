"""Backups of running domains on a libvirt host: push-mode backup jobs with checkpoints
(see ``virtplane.drivers.backups`` for the model; measured on libvirt 9.0 with QEMU 7.2).

The job writes into volumes made first in the target's pool (``REUSE_EXTERNAL``): a full
backup's is an empty qcow2 of the disk's size, an incremental's a qcow2 overlay on the previous
backup's volume, so only the clusters the checkpoint saw change are written. Every disk of the
domain is named in the job and the checkpoint, those not asked for with ``no``, so that nothing
is backed up or tracked by default.

All functions block and take an open virConnect.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from virtplane.domain.resources import Capability
from virtplane.drivers.backups import BackupCheck, BackupJob, BackupJobState, BackupRequest, DiskBackup
from virtplane.drivers.base import PoolRef, VolumeInfo
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt import _libvirt, storage
from virtplane.drivers.libvirt.backup_verify import verify_chains
from virtplane.drivers.libvirt.calls import LibvirtCalls
from virtplane.drivers.libvirt.domain_xml import parse_domain_xml, volume_xml

if TYPE_CHECKING:
    from virtplane.drivers.base import PoolRef

_BACKUP_OPERATION = 9  # VIR_DOMAIN_JOB_OPERATION_BACKUP (libvirt >= 6.0)


def job_xml(all_devs: list[str], targets: dict[str, str], incremental_from: str | None) -> str:
    """The ``<domainbackup>``: the devs in ``targets`` into their files, the rest not at all."""
    backup = ET.Element("domainbackup", mode="push")
    if incremental_from is not None:
        ET.SubElement(backup, "incremental").text = incremental_from
    disks = ET.SubElement(backup, "disks")
    for dev in all_devs:
        if dev not in targets:
            ET.SubElement(disks, "disk", name=dev, backup="no")
            continue
        disk = ET.SubElement(disks, "disk", name=dev, backup="yes", type="file")
        ET.SubElement(disk, "target", file=targets[dev])
        ET.SubElement(disk, "driver", type="qcow2")
    return ET.tostring(backup, encoding="unicode")


def checkpoint_xml(name: str, all_devs: list[str], tracked: set[str]) -> str:
    checkpoint = ET.Element("domaincheckpoint")
    ET.SubElement(checkpoint, "name").text = name
    disks = ET.SubElement(checkpoint, "disks")
    for dev in all_devs:
        ET.SubElement(disks, "disk", name=dev, checkpoint="bitmap" if dev in tracked else "no")
    return ET.tostring(checkpoint, encoding="unicode")


def checkpoint_names(dom: Any) -> list[str]:
    lv = _libvirt.load()
    return [c.getName() for c in dom.listAllCheckpoints(lv.VIR_DOMAIN_CHECKPOINT_LIST_TOPOLOGICAL)]


def begin_backup(conn: Any, request: BackupRequest) -> None:
    lv = _libvirt.load()
    dom = conn.lookupByName(request.domain)
    if request.checkpoint in checkpoint_names(dom):
        return  # the job that made it began already (a retry after a crash or a lost answer)
    devs = {path: dev for dev, path in parse_domain_xml(dom.XMLDesc(0)).disks}
    pool = storage.ensure_pool(conn, request.target)
    targets = {_dev_of(devs, request.domain, disk): _target_volume(pool, disk) for disk in request.disks}
    all_devs = sorted(devs.values())
    dom.backupBegin(
        job_xml(all_devs, targets, request.incremental_from),
        checkpoint_xml(request.checkpoint, all_devs, set(targets)),
        lv.VIR_DOMAIN_BACKUP_BEGIN_REUSE_EXTERNAL,
    )


def _dev_of(devs: dict[str, str], domain: str, disk: DiskBackup) -> str:
    dev = devs.get(disk.disk_path)
    if dev is None:
        raise PermanentError(f"domain {domain} has no disk {disk.disk_path!r} to back up")
    return dev


def _target_volume(pool: Any, disk: DiskBackup) -> str:
    """The path of a new, empty volume for ``disk``'s backup (a leftover of a begin that failed
    after making it is made again: nothing was written into it)."""
    storage.check_name("backup volume name", disk.volume)
    leftover = storage.lookup_volume(pool, disk.volume)
    if leftover is not None:
        leftover.delete(0)
    backing = ""
    if disk.base_volume is not None:
        base = storage.lookup_volume(pool, disk.base_volume)
        if base is None:
            raise PermanentError(
                f"the previous backup's volume {disk.base_volume!r} is missing from the target"
            )
        backing = str(base.path())
    return str(pool.createXML(volume_xml(disk.volume, disk.size_bytes, backing=backing), 0).path())


def backup_job(conn: Any, name: str) -> BackupJob:
    lv = _libvirt.load()
    dom = conn.lookupByName(name)
    current = dict(dom.jobStats(0))
    if current.get("type", lv.VIR_DOMAIN_JOB_NONE) != lv.VIR_DOMAIN_JOB_NONE:
        if current.get("operation") == _BACKUP_OPERATION:
            return BackupJob(BackupJobState.RUNNING, *_bytes(current))
        return BackupJob(BackupJobState.UNKNOWN, error="another job runs on the domain")
    flags = lv.VIR_DOMAIN_JOB_STATS_COMPLETED | lv.VIR_DOMAIN_JOB_STATS_KEEP_COMPLETED
    done = dict(dom.jobStats(flags))
    if done.get("operation") != _BACKUP_OPERATION:
        return BackupJob(BackupJobState.UNKNOWN)
    if done.get("type") == lv.VIR_DOMAIN_JOB_COMPLETED:
        return BackupJob(BackupJobState.SUCCEEDED, *_bytes(done))
    return BackupJob(
        BackupJobState.FAILED, *_bytes(done), error=str(done.get("errmsg", "the backup job failed"))
    )


def _bytes(stats: dict[str, Any]) -> tuple[int, int]:
    return int(stats.get("disk_total", 0)), int(stats.get("disk_processed", 0))


def abort_backup(conn: Any, name: str) -> None:
    if backup_job(conn, name).state is BackupJobState.RUNNING:
        conn.lookupByName(name).abortJob()


def delete_checkpoint(conn: Any, name: str, checkpoint: str) -> None:
    lv = _libvirt.load()
    dom = conn.lookupByName(name)
    try:
        dom.checkpointLookupByName(checkpoint, 0).delete(0)
    except lv.libvirtError as exc:
        if _libvirt.error_code(exc) != lv.VIR_ERR_NO_DOMAIN_CHECKPOINT:
            raise


def checkpoint_definitions(conn: Any, name: str) -> tuple[str, ...]:
    lv = _libvirt.load()
    dom = conn.lookupByName(name)
    ordered = dom.listAllCheckpoints(lv.VIR_DOMAIN_CHECKPOINT_LIST_TOPOLOGICAL)
    return tuple(str(c.getXMLDesc(0)) for c in ordered)


def redefine_checkpoints(conn: Any, name: str, definitions: tuple[str, ...]) -> None:
    lv = _libvirt.load()
    dom = conn.lookupByName(name)
    present = set(checkpoint_names(dom))
    for definition in definitions:
        checkpoint = ET.fromstring(definition).findtext("name")
        if checkpoint is None:
            raise PermanentError("a checkpoint definition without a name")
        if checkpoint not in present:
            dom.checkpointCreateXML(definition, lv.VIR_DOMAIN_CHECKPOINT_CREATE_REDEFINE)
            present.add(checkpoint)


class BackupJobs(LibvirtCalls):
    """The driver's ``BackupOperations`` (QEMU hosts; libvirt's test driver has no backup jobs)."""

    async def begin_backup(self, request: BackupRequest) -> None:
        self._require(Capability.BACKUP)
        await self._call(lambda conn: begin_backup(conn, request))

    async def backup_job(self, name: str) -> BackupJob:
        self._require(Capability.BACKUP)
        return await self._call(lambda conn: backup_job(conn, name))

    async def abort_backup(self, name: str) -> None:
        self._require(Capability.BACKUP)
        await self._call(lambda conn: abort_backup(conn, name))

    async def checkpoints(self, name: str) -> tuple[str, ...]:
        self._require(Capability.BACKUP)
        return await self._call(lambda conn: tuple(checkpoint_names(conn.lookupByName(name))))

    async def delete_checkpoint(self, name: str, checkpoint: str) -> None:
        self._require(Capability.BACKUP)
        await self._call(lambda conn: delete_checkpoint(conn, name, checkpoint))

    async def checkpoint_definitions(self, name: str) -> tuple[str, ...]:
        self._require(Capability.BACKUP)
        return await self._call(lambda conn: checkpoint_definitions(conn, name))

    async def redefine_checkpoints(self, name: str, definitions: tuple[str, ...]) -> None:
        self._require(Capability.BACKUP)
        await self._call(lambda conn: redefine_checkpoints(conn, name, definitions))

    async def verify_backup(self, target: PoolRef, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
        return await asyncio.to_thread(verify_chains, target.path, chains)

    async def restore_from_backup(
        self, target: PoolRef, backup_volume: str, pool: PoolRef, name: str
    ) -> VolumeInfo:
        self._require(Capability.BACKUP)
        return await self._call(lambda conn: storage.restore_volume(conn, target, backup_volume, pool, name))
