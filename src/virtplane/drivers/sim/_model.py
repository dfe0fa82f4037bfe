"""Plain data shared by the simulator's modules: timing, fault kinds, domain records, state views."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from virtplane.domain.phases import RESIDENT_STATES
from virtplane.domain.resources import ExitReason
from virtplane.domain.vocabulary import (
    DOMAIN_FAULTS as DOMAIN_FAULTS,
)  # the sim's modules import them from here
from virtplane.domain.vocabulary import FaultKind as FaultKind
from virtplane.drivers.base import DomainSpec, DomainState, MigrationPhase

from ._changes import Persisted, Record

if TYPE_CHECKING:
    from ._backup_records import SimBackupJob, SimCheckpoint

URI_SCHEME = "sim://"


ARMED_KINDS = (
    FaultKind.FAIL_START,
    FaultKind.FAIL_MIGRATION,
    FaultKind.STALL_MIGRATION,
    FaultKind.IGNORE_UNPLUG,
)
"""Faults that wait on a host for their trigger (a start, a migration, a detach)."""


@dataclass(frozen=True)
class ArmedFaults:
    """The faults waiting on one host: (kind, domain or None for any domain) → times left.
    Immutable: arming or spending one gives a new value."""

    counts: Mapping[tuple[FaultKind, str | None], int] = field(default_factory=lambda: MappingProxyType({}))

    def arm(self, kind: FaultKind, domain: str | None, count: int) -> ArmedFaults:
        key = (kind, domain)
        return ArmedFaults(MappingProxyType({**self.counts, key: self.counts.get(key, 0) + count}))

    def take(self, kind: FaultKind, domain: str) -> ArmedFaults | None:
        """Without one armed fault for ``domain`` (its own first, then a host-wide one);
        None when none is armed."""
        for key in ((kind, domain), (kind, None)):
            left = self.counts.get(key, 0)
            if left > 0:
                counts = dict(self.counts)
                if left == 1:
                    del counts[key]
                else:
                    counts[key] = left - 1
                return ArmedFaults(MappingProxyType(counts))
        return None

    def of(self, kind: FaultKind) -> dict[str | None, int]:
        return {domain: left for (armed, domain), left in self.counts.items() if armed is kind}


@dataclass(frozen=True)
class SimTiming:
    """How fast the simulated world moves; ``clock`` is wall time unless a test passes its own.
    ``time_scale``: how many simulated seconds of migration one loop second is worth."""

    boot_seconds: float = 1.5
    shutdown_seconds: float = 0.5
    link_mib_s: float = 1000.0
    time_scale: float = 1.0
    migration_tick_s: float = 0.05
    clock: Callable[[], float] = time.time
    detach_seconds: float = 0.5  # how long a guest takes to release a device asked back (hot-unplug)
    backup_mib_s: float = 1000.0  # how fast a backup job copies (simulated seconds, as migrations)

    def __post_init__(self) -> None:
        if min(self.boot_seconds, self.shutdown_seconds) < 0 or self.link_mib_s <= 0:
            raise ValueError("delays must be >= 0 and the link bandwidth > 0")
        if self.time_scale <= 0 or self.migration_tick_s <= 0 or self.backup_mib_s <= 0:
            raise ValueError("time_scale, migration_tick_s and backup_mib_s must be > 0")


class SimFaultError(ValueError):
    """A fault or sim-only helper call that does not apply: unknown host, domain or volume,
    or a domain that is not in a state the fault can act on."""


@dataclass(frozen=True)
class FaultRecord:
    time: float
    host: str
    kind: FaultKind
    domain: str | None = None
    count: int = 1


@dataclass(frozen=True)
class MigrationTransition:
    """A migration began (``outcome`` None) or ended (COMPLETED, FAILED or ABORTED), between
    hosts ``source`` and ``target`` (names); ``time`` is the cloud's clock."""

    time: float
    domain: str
    source: str
    target: str
    outcome: MigrationPhase | None = None

    @property
    def started(self) -> bool:
        return self.outcome is None


def host_uri(name: str) -> str:
    return f"{URI_SCHEME}{name}"


def host_name(uri_or_name: str) -> str:
    """``sim://NAME`` (with a query or not, as ``sim://NAME?kvm=works``) or ``NAME`` → ``NAME``."""
    name = uri_or_name.removeprefix(URI_SCHEME) if uri_or_name.startswith(URI_SCHEME) else uri_or_name
    return name.split("?", 1)[0].strip("/")


class SimDomain(Record):
    """One domain on one host. Its persisted fields are what a host keeps across a restart."""

    spec = Persisted[DomainSpec]()  # the persistent definition
    live = Persisted[DomainSpec | None]()  # the running instance's config; set only while active
    state = Persisted[DomainState]()
    exit_reason = Persisted[ExitReason | None]()
    memory = Persisted[str]()  # a marker of the guest's memory content, for memory snapshot tests
    boots = Persisted[int]()
    state_before_migration = Persisted[DomainState | None]()
    # while STARTING or SHUTTING_DOWN: when (the cloud's clock) the transition ends, and whether
    # the boot is an injected failure; kept so a restarted process can finish the transition
    due = Persisted[float]()
    boot_fails = Persisted[bool]()
    # the host's checkpoint metadata, oldest first, and the last backup job (``_backups``)
    checkpoints = Persisted["tuple[SimCheckpoint, ...]"]()
    backup = Persisted["SimBackupJob | None"]()

    def __init__(
        self,
        spec: DomainSpec,
        *,
        live: DomainSpec | None = None,
        state: DomainState = DomainState.SHUTOFF,
        exit_reason: ExitReason | None = None,
        memory: str = "",
        boots: int = 0,
        state_before_migration: DomainState | None = None,
        due: float = 0.0,
        boot_fails: bool = False,
        checkpoints: tuple[SimCheckpoint, ...] = (),
        backup: SimBackupJob | None = None,
    ) -> None:
        self.spec = spec
        self.live = live
        self.state = state
        self.exit_reason = exit_reason
        self.memory = memory
        self.boots = boots
        self.state_before_migration = state_before_migration
        self.due = due
        self.boot_fails = boot_fails
        self.checkpoints = checkpoints
        self.backup = backup
        self.timer: asyncio.TimerHandle | None = None  # pending boot/shutdown transition

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def active(self) -> bool:
        return self.state in RESIDENT_STATES

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@dataclass(frozen=True)
class SimHostState:
    name: str
    uri: str
    up: bool
    connected: bool
    vcpus: int
    memory_mib: int
    used_vcpus: int
    used_memory_mib: int
    domains: Mapping[str, DomainState]


@dataclass(frozen=True)
class SimState:
    """A copy of the whole simulated world at one instant, for test invariants."""

    hosts: Mapping[str, SimHostState]

    def active_hosts(self, domain: str) -> list[str]:
        """Hosts on which ``domain`` has a live instance (more than one is a split brain)."""
        return sorted(
            name
            for name, host in self.hosts.items()
            if host.domains.get(domain, DomainState.SHUTOFF) in RESIDENT_STATES
        )

    def placements(self) -> dict[str, list[str]]:
        """Every domain with a live instance → the hosts it is live on."""
        where: dict[str, list[str]] = {}
        for name in sorted(self.hosts):
            for domain, state in self.hosts[name].domains.items():
                if state in RESIDENT_STATES:
                    where.setdefault(domain, []).append(name)
        return where
