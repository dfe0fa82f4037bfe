"""The records of simulated backups (``_backups``): a domain's checkpoints and its last job,
kept in its row of the state file."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import TypeAdapter

from virtplane.drivers.backups import BackupJobState
from virtplane.drivers.base import PoolRef
from virtplane.drivers.errors import PermanentError


@dataclass(frozen=True)
class SimCheckpoint:
    name: str
    made_at: float  # the cloud's clock
    disks: tuple[tuple[str, str], ...]  # (tracked disk's path, its content then)

    def definition(self) -> str:
        return _CHECKPOINT.dump_json(self).decode()

    @staticmethod
    def from_definition(text: str) -> SimCheckpoint:
        try:
            return _CHECKPOINT.validate_json(text)
        except ValueError as exc:
            raise PermanentError(f"not a checkpoint definition of this host: {exc}") from None


@dataclass(frozen=True)
class SimBackupJob:
    state: BackupJobState
    host: str  # the host that made it (whose pool holds the volumes)
    target: PoolRef
    started_at: float  # the cloud's clock
    total_bytes: int
    volumes: tuple[tuple[str, str], ...]  # (target volume, the content it gets on success)
    processed_bytes: int = 0  # once ended
    error: str = ""


_CHECKPOINT = TypeAdapter(SimCheckpoint)
CHECKPOINTS = TypeAdapter(tuple[SimCheckpoint, ...])
JOB = TypeAdapter(SimBackupJob | None)


__all__ = ["CHECKPOINTS", "JOB", "SimBackupJob", "SimCheckpoint"]
