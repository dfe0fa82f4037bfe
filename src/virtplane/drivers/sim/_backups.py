"""Simulated backups, as libvirt makes them (``virtplane.drivers.backups``; libvirt 9.0 measured
in /work/notes/backup-spike.md): push-mode jobs with checkpoints.

- A checkpoint belongs to the domain's record on its host: kept across a stop and start of a
  persistent domain, dropped by undefine, and NOT carried by a live migration (the arriving
  domain has none until ``redefine_checkpoints``), as libvirt's metadata is not.
- A checkpoint remembers when it was made and what each tracked disk held then (the sim's
  dirty bitmap). An incremental job copies what the guest wrote since: the disk's content
  changed (one 64 KiB cluster per started 64 KiB of it) plus the guest's disk write rate
  (``SimGuest.disk_write_mib_s``) over the simulated time since, never more than the disk.
  The time counts whether the domain ran or not: never fewer bytes than the guest wrote.
- A full job copies the disk's allocated size; simulator volumes are fully allocated, so
  that is its size.
- A job takes ``bytes / backup_mib_s`` simulated seconds (``time_scale`` of them a clock
  second), one job per domain at a time; the domain must be live and not migrating, and a
  migration is refused while a job runs. Progress is read from the clock: no timer, so a
  restarted simulator finds the job where the time has taken it. The target volumes exist
  from the begin, empty; a job that succeeds gives them the disks' content at the begin (the
  point in time a backup captures); one that fails or is aborted leaves them empty for the
  caller to delete. A domain that stops during a job fails the job.
- Verification finds a chain's volume missing, or one ``corrupt`` damaged (a test's fault: the
  content is marked, as a flipped cluster that ``qemu-img check`` reports).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from virtplane.drivers.backups import BackupCheck, BackupJob, BackupJobState, BackupRequest
from virtplane.drivers.base import DomainState
from virtplane.drivers.errors import NotRunning, PermanentError, TransientError

from ._backup_records import SimBackupJob, SimCheckpoint
from ._storage import GIB, SimVolume, volume_path

if TYPE_CHECKING:
    from virtplane.drivers.base import PoolRef

    from ._guest import SimGuests
    from ._model import SimDomain, SimTiming
    from ._storage import SimStorage

MIB = 1024**2
CORRUPTED = "\x00corrupted\x00"
"""The mark ``corrupt`` puts before a volume's content."""
CLUSTER = 64 * 1024  # a qcow2 cluster: the grain of a dirty bitmap

_LIVE = (DomainState.STARTING, DomainState.RUNNING, DomainState.PAUSED, DomainState.SHUTTING_DOWN)


class SimBackups:
    """The backup jobs and checkpoints of the world's domains (kept in their records)."""

    def __init__(self, storage: SimStorage, timing: SimTiming, guests: SimGuests) -> None:
        self._storage = storage
        self._timing = timing
        self._guests = guests

    def begin(self, host: str, domain: SimDomain, request: BackupRequest) -> None:
        if any(c.name == request.checkpoint for c in domain.checkpoints):
            return  # the job that made it began already (a retry after a crash or a lost answer)
        if domain.state is DomainState.MIGRATING:
            raise TransientError(f"domain {domain.name} is migrating: back it up once it has landed")
        if domain.state not in _LIVE:
            raise NotRunning(f"domain {domain.name} is not running: copy its volumes instead")
        if not request.disks:  # as libvirt: "no disks selected for backup"
            raise PermanentError(f"domain {domain.name}: no disks selected for backup")
        self.settle(domain)
        if domain.backup is not None and domain.backup.state is BackupJobState.RUNNING:
            raise TransientError(f"a backup job runs on domain {domain.name} already")
        base = None
        if request.incremental_from is not None:
            base = next((c for c in domain.checkpoints if c.name == request.incremental_from), None)
            if base is None:
                raise PermanentError(
                    f"checkpoint {request.incremental_from!r} of domain {domain.name} not found on sim://{host}"
                )
        self._storage.ensure_pool(host, request.target)
        pool = self._storage.pool(host, request.target)
        live_paths = {d.path for d in (domain.live or domain.spec).disks}
        total, volumes, tracked = 0, [], []
        for disk in request.disks:
            if disk.disk_path not in live_paths:
                raise PermanentError(f"domain {domain.name} has no disk {disk.disk_path!r} to back up")
            content, size = self._disk(host, disk.disk_path, disk.size_bytes)
            if base is None:
                total += size
            else:
                total += self._dirty_bytes(domain.name, base, disk.disk_path, content, size)
            if disk.base_volume is not None and disk.base_volume not in pool.volumes:
                raise PermanentError(
                    f"the previous backup's volume {disk.base_volume!r} is missing from the target"
                )
            volumes.append((disk.volume, content))
            tracked.append((disk.disk_path, content))
        for disk in request.disks:  # made only once every disk checked out, as one libvirt call
            pool.volumes.pop(disk.volume)  # a leftover of a begin that failed: nothing written into it
            size_gib = max(1, -(-disk.size_bytes // GIB))
            pool.check_room(size_gib, f"backup volume {disk.volume}")
            path = volume_path(request.target.name, disk.volume)
            pool.volumes.put(disk.volume, SimVolume(disk.volume, path, size_gib))
        now = self._timing.clock()
        domain.checkpoints = (*domain.checkpoints, SimCheckpoint(request.checkpoint, now, tuple(tracked)))
        domain.backup = SimBackupJob(BackupJobState.RUNNING, host, request.target, now, total, tuple(volumes))
        self.settle(domain)  # nothing to copy: done at once

    def _disk(self, host: str, path: str, size_bytes: int) -> tuple[str, int]:
        """(content, allocated bytes) of a disk as ``host`` sees it; a path that is not a
        simulator volume is taken on trust at the size the caller gives."""
        found = self._storage.locate_local(host, path)
        if found is None:
            return "", size_bytes
        return found[1].content, found[1].size_gib * GIB

    def _dirty_bytes(self, name: str, base: SimCheckpoint, path: str, content: str, size: int) -> int:
        then = dict(base.disks)
        if path not in then:
            raise PermanentError(f"checkpoint {base.name!r} does not track disk {path!r}: back it up in full")
        changed = 0 if content == then[path] else max(1, -(-len(content.encode()) // CLUSTER)) * CLUSTER
        seconds = max(0.0, self._timing.clock() - base.made_at) * self._timing.time_scale
        written = round(self._guests.of(name).disk_write_mib_s * MIB * seconds)
        return min(size, changed + written)

    def _progress(self, job: SimBackupJob) -> int:
        seconds = max(0.0, self._timing.clock() - job.started_at) * self._timing.time_scale
        return min(job.total_bytes, round(self._timing.backup_mib_s * MIB * seconds))

    def settle(self, domain: SimDomain) -> None:
        """End a running job whose bytes are all copied by now."""
        job = domain.backup
        if job is None or job.state is not BackupJobState.RUNNING or self._progress(job) < job.total_bytes:
            return
        pool = self._storage.find_pool("" if job.target.shared else job.host, job.target.name)
        missing = [v for v, _ in job.volumes if pool is None or v not in pool.volumes]
        if pool is None or missing:
            self._end(
                domain, BackupJobState.FAILED, f"the target volumes {missing} were removed during the job"
            )
            return
        for volume, content in job.volumes:
            pool.volumes[volume].content = content
        domain.backup = replace(job, state=BackupJobState.SUCCEEDED, processed_bytes=job.total_bytes)

    def _end(self, domain: SimDomain, state: BackupJobState, error: str) -> None:
        job = domain.backup
        if job is not None and job.state is BackupJobState.RUNNING:
            domain.backup = replace(job, state=state, processed_bytes=self._progress(job), error=error)

    def job(self, domain: SimDomain) -> BackupJob:
        self.settle(domain)
        job = domain.backup
        if job is None:
            return BackupJob(BackupJobState.UNKNOWN)
        processed = self._progress(job) if job.state is BackupJobState.RUNNING else job.processed_bytes
        return BackupJob(job.state, job.total_bytes, processed, job.error)

    def abort(self, domain: SimDomain) -> None:
        self.settle(domain)
        self._end(domain, BackupJobState.FAILED, "the backup job was aborted")

    def stopped(self, domain: SimDomain) -> None:
        """The domain's live instance ends: a job still copying fails, as QEMU's does."""
        self.settle(domain)
        self._end(domain, BackupJobState.FAILED, f"domain {domain.name} stopped during the backup")

    def running(self, domain: SimDomain) -> bool:
        self.settle(domain)
        return domain.backup is not None and domain.backup.state is BackupJobState.RUNNING

    @staticmethod
    def delete_checkpoint(domain: SimDomain, checkpoint: str) -> None:
        # the older checkpoints saw every write since them already: nothing merges in the sim
        domain.checkpoints = tuple(c for c in domain.checkpoints if c.name != checkpoint)

    @staticmethod
    def redefine(domain: SimDomain, definitions: tuple[str, ...]) -> None:
        present = {c.name for c in domain.checkpoints}
        added = [c for c in map(SimCheckpoint.from_definition, definitions) if c.name not in present]
        if added:
            domain.checkpoints = (*domain.checkpoints, *added)

    def corrupt(self, host: str, target: PoolRef, volume: str) -> None:
        """A fault: damage a backup volume, as a bit flip on the target's disk would."""
        found = self._storage.pool(host, target).volumes.get(volume)
        if found is None:
            raise PermanentError(f"no volume {volume} in pool {target.name}")
        found.content = CORRUPTED + found.content

    def verify(self, host: str, target: PoolRef, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
        self._storage.ensure_pool(host, target)
        volumes = self._storage.pool(host, target).volumes
        for chain in chains:
            for volume in chain:
                found = volumes.get(volume)
                if found is None:
                    return BackupCheck(False, f"{volume}: missing from the target (a broken chain)")
                if found.content.startswith(CORRUPTED):
                    return BackupCheck(False, f"{volume}: the image check found corrupt clusters")
        files = sum(len(chain) for chain in chains)
        return BackupCheck(True, f"{files} file(s) of {len(chains)} disk(s) checked, each disk read whole")


__all__ = ["CORRUPTED", "SimBackups"]
