"""Durable power intents, kept as annotations on the VirtualMachine (DESIGN.md §1, §2).

An intent is what the control plane means to do after a window in which it tears
something down. It is written to the VM in the store *before* the destructive step
and cleared only after the step it asks for was confirmed. Annotations under
``SYSTEM_PREFIX`` belong to the control plane: the API neither takes them from
users nor lets a snapshot's copy of them leak back (see ``strip_system``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import TypeVar

SYSTEM_PREFIX = "virtplane.io/"

START_REQUESTED = f"{SYSTEM_PREFIX}start-requested"
STOP_REQUESTED = f"{SYSTEM_PREFIX}stop-requested"
RESTART_REQUESTED = f"{SYSTEM_PREFIX}restart-requested"
RESTORE_POWER_STATE = f"{SYSTEM_PREFIX}restore-power-state"
MAINTENANCE_POWER_STATE = f"{SYSTEM_PREFIX}maintenance-power-state"
HELD_BY = f"{SYSTEM_PREFIX}held-by"
RESUME_FROM_MEMORY = f"{SYSTEM_PREFIX}resume-from-memory"
"""The snapshot whose saved memory the start after a restore resumes (see ``memory_resume_stands``)."""
RECOVERY = f"{SYSTEM_PREFIX}recovery"
"""Released from a fenced host, to start elsewhere in its turn: ``STAGE:CLUSTER:HOST``."""
MIGRATION = f"{SYSTEM_PREFIX}migration"
"""A live migration in flight (JSON of ``MigrationIntent``); kept apart from the power intents."""


class PowerState(StrEnum):
    RUNNING = "Running"
    STOPPED = "Stopped"


class StopMode(StrEnum):
    GRACEFUL = "graceful"
    FORCE = "force"


class RestartStage(StrEnum):
    """A restart is stop-then-start; the stage survives a crash between the two."""

    STOPPING_GRACEFUL = "stopping-graceful"
    STOPPING_FORCE = "stopping-force"
    STARTING = "starting"


class RecoveryStage(StrEnum):
    WAITING = "waiting"
    """Waiting for a recovery slot of its cluster."""
    STARTING = "starting"
    """Holds a slot: starting elsewhere, until it runs."""


@dataclass(frozen=True)
class Recovery:
    """A VM released from a fenced host that must run again (issue 15)."""

    stage: RecoveryStage
    cluster: str  # the failed host's: whose recovery slots it takes
    from_host: str

    def encode(self) -> str:
        return f"{self.stage.value}:{self.cluster}:{self.from_host}"

    @staticmethod
    def decode(raw: str | None) -> Recovery | None:
        if not raw:  # most VMs: no recovery (and no ValueError from an empty stage to catch)
            return None
        stage, _, rest = raw.partition(":")
        cluster, _, from_host = rest.partition(":")
        parsed = _enum_or_none(RecoveryStage, stage)
        return Recovery(parsed, cluster, from_host) if parsed and cluster and from_host else None


@dataclass(frozen=True)
class Intents:
    start: bool = False
    stop: StopMode | None = None
    stop_by_system: bool = False  # stop asked by restore/maintenance, not by the VM's owner
    restart: RestartStage | None = None
    restore_power_state: PowerState | None = None
    maintenance_power_state: PowerState | None = None
    held_by: str | None = None  # the operation or maintenance holding the VM (Maintenance condition)
    resume_from_memory: str | None = None  # a snapshot: the start after its restore resumes its memory
    recovery: Recovery | None = None  # released from a fenced host: to start elsewhere, in its turn

    def with_(self, **changes: object) -> Intents:
        return replace(self, **changes)  # type: ignore[arg-type]


E = TypeVar("E", bound=StrEnum)


def _enum_or_none(cls: type[E], raw: str | None) -> E | None:
    if raw is None:
        return None
    try:
        return cls(raw)
    except ValueError:
        return None  # an unreadable intent is treated as absent, never guessed


def read_recovery(annotations: Mapping[str, str]) -> Recovery | None:
    """Only the recovery intent: what a watch on every VM change asks (``read_intents``' part)."""
    return Recovery.decode(annotations.get(RECOVERY))


def read_intents(annotations: Mapping[str, str]) -> Intents:
    stop_raw = annotations.get(STOP_REQUESTED)
    stop_mode, _, by = (stop_raw or "").partition(":")
    return Intents(
        start=START_REQUESTED in annotations,
        stop=_enum_or_none(StopMode, stop_mode) if stop_raw else None,
        stop_by_system=by == "system",
        restart=_enum_or_none(RestartStage, annotations.get(RESTART_REQUESTED)),
        restore_power_state=_enum_or_none(PowerState, annotations.get(RESTORE_POWER_STATE)),
        maintenance_power_state=_enum_or_none(PowerState, annotations.get(MAINTENANCE_POWER_STATE)),
        held_by=annotations.get(HELD_BY) or None,
        resume_from_memory=annotations.get(RESUME_FROM_MEMORY) or None,
        recovery=read_recovery(annotations),
    )


def write_intents(annotations: Mapping[str, str], intents: Intents) -> dict[str, str]:
    """``annotations`` with the intent keys replaced by ``intents`` (other keys kept)."""
    result = {k: v for k, v in annotations.items() if k not in _INTENT_KEYS}
    if intents.start:
        result[START_REQUESTED] = "true"
    if intents.stop is not None:
        result[STOP_REQUESTED] = intents.stop.value + (":system" if intents.stop_by_system else ":user")
    if intents.restart is not None:
        result[RESTART_REQUESTED] = intents.restart.value
    if intents.restore_power_state is not None:
        result[RESTORE_POWER_STATE] = intents.restore_power_state.value
    if intents.maintenance_power_state is not None:
        result[MAINTENANCE_POWER_STATE] = intents.maintenance_power_state.value
    if intents.held_by:
        result[HELD_BY] = intents.held_by
    if intents.resume_from_memory:
        result[RESUME_FROM_MEMORY] = intents.resume_from_memory
    if intents.recovery is not None:
        result[RECOVERY] = intents.recovery.encode()
    return result


_INTENT_KEYS = frozenset(
    {
        START_REQUESTED,
        STOP_REQUESTED,
        RESTART_REQUESTED,
        RESTORE_POWER_STATE,
        MAINTENANCE_POWER_STATE,
        HELD_BY,
        RESUME_FROM_MEMORY,
        RECOVERY,
    }
)


def memory_resume_stands(intents: Intents) -> bool:
    """A restore's memory image is for the one start its Running power state becomes: it
    stands while that start is pending (the recorded state, then the start request) and
    goes with it, so a later start (after a stop, under another policy) never resumes
    stale memory over disks that moved on."""
    return intents.resume_from_memory is not None and (
        intents.start or intents.restore_power_state is PowerState.RUNNING
    )


def split_annotations(annotations: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(user annotations, system annotations)."""
    user = {k: v for k, v in annotations.items() if not k.startswith(SYSTEM_PREFIX)}
    system = {k: v for k, v in annotations.items() if k.startswith(SYSTEM_PREFIX)}
    return user, system


def strip_system(annotations: Mapping[str, str]) -> dict[str, str]:
    """Only the user's annotations: what a snapshot may bring back on restore."""
    return split_annotations(annotations)[0]


@dataclass(frozen=True)
class MigrationIntent:
    """A live migration the control plane started: written to the VM *before* the driver's
    migrate call and cleared, in the same write that moves ``status.host``, once the outcome
    is known from the drivers. While it stands, the VM controller leaves the domain alone."""

    source: str
    target: str
    attempt: int
    requested_by: str  # "maintenance/<host>" or "operation/<name>"
    started_at: datetime
    copy_storage: bool = False

    def describe(self) -> str:
        return f"migrating from {self.source} to {self.target} (attempt {self.attempt})"

    def encode(self) -> str:
        raw = asdict(self)
        raw["started_at"] = self.started_at.isoformat()
        return json.dumps(raw, sort_keys=True)


def read_migration(annotations: Mapping[str, str]) -> MigrationIntent | None:
    """The migration intent, or None; an unreadable one is treated as absent, never guessed."""
    raw = annotations.get(MIGRATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return MigrationIntent(
            source=str(data["source"]),
            target=str(data["target"]),
            attempt=int(data["attempt"]),
            requested_by=str(data["requested_by"]),
            started_at=datetime.fromisoformat(str(data["started_at"])),
            copy_storage=bool(data.get("copy_storage", False)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def write_migration(annotations: Mapping[str, str], intent: MigrationIntent | None) -> dict[str, str]:
    """``annotations`` with the migration intent set to ``intent`` (removed when None)."""
    result = {k: v for k, v in annotations.items() if k != MIGRATION}
    if intent is not None:
        result[MIGRATION] = intent.encode()
    return result
