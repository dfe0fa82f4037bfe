"""Plain data shared by the simulator's modules: fault kinds, domain records, read-only state views."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DomainSpec, DomainState, MigrationPhase

URI_SCHEME = "sim://"

ACTIVE_STATES = frozenset(
    {
        DomainState.STARTING,
        DomainState.RUNNING,
        DomainState.PAUSED,
        DomainState.SHUTTING_DOWN,
        DomainState.MIGRATING,
    }
)
"""States in which a domain has a live instance that holds host vcpus and memory."""


class FaultKind(StrEnum):
    GUEST_SHUTDOWN = "guest-shutdown"
    GUEST_RESET = "guest-reset"
    CRASH = "crash"
    FAIL_START = "fail-start"
    FAIL_MIGRATION = "fail-migration"
    STALL_MIGRATION = "stall-migration"
    HOST_DOWN = "host-down"
    HOST_UP = "host-up"
    DISCONNECT = "disconnect"
    RECONNECT = "reconnect"


DOMAIN_FAULTS = frozenset({FaultKind.GUEST_SHUTDOWN, FaultKind.GUEST_RESET, FaultKind.CRASH})
"""Faults that act on one existing domain at once, so they need ``domain``."""


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
    """``sim://NAME`` or ``NAME`` → ``NAME``."""
    name = uri_or_name.removeprefix(URI_SCHEME) if uri_or_name.startswith(URI_SCHEME) else uri_or_name
    return name.strip("/")


@dataclass(eq=False)
class SimDomain:
    spec: DomainSpec  # the persistent definition
    live: DomainSpec | None = None  # the running instance's config; set only while active
    state: DomainState = DomainState.SHUTOFF
    exit_reason: ExitReason | None = None
    timer: asyncio.TimerHandle | None = None  # pending boot/shutdown transition
    memory: str = ""  # a marker of the guest's memory content, for memory snapshot tests
    boots: int = 0
    state_before_migration: DomainState | None = None
    # while STARTING or SHUTTING_DOWN: when (cloud.clock) the transition ends, and whether
    # the boot is an injected failure; stored so a restarted process can finish the transition
    due: float = 0.0
    boot_fails: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

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
            if host.domains.get(domain, DomainState.SHUTOFF) in ACTIVE_STATES
        )

    def placements(self) -> dict[str, list[str]]:
        """Every domain with a live instance → the hosts it is live on."""
        where: dict[str, list[str]] = {}
        for name in sorted(self.hosts):
            for domain, state in self.hosts[name].domains.items():
                if state in ACTIVE_STATES:
                    where.setdefault(domain, []).append(name)
        return where
