"""A simulated host's record: what it has and holds, the events it sends, the timers it runs.

Every state change of a host and its domains goes through ``SimHost``, built on this class,
so that capacity counters, timers and events stay consistent: here are the parts every
operation uses (room, powering a domain on and off, events, timers); ``_lifecycle`` has the
domain operations and ``_host`` the faults. Timers exist only for domains in a transition
(booting, shutting down); a steady domain costs one dict entry. A host reaches the rest of
the world only through its ``HostPorts``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainSpec,
    DomainState,
    HostFacts,
)
from virtplane.drivers.errors import NotFound, PermanentError, TransientError

from ._changes import ChangeLog, Entity, Persisted, Record, RecordMap
from ._console import SimConsoles
from ._guest import SimGuests
from ._model import ArmedFaults, FaultKind, SimDomain, SimTiming, host_uri


class BackupHooks(Protocol):
    """What a host tells the backups when a domain's live instance ends."""

    def stopped(self, domain: SimDomain) -> None: ...


class MigrationHooks(Protocol):
    """What a host tells the migrations when its domains or the host itself stop."""

    def fail_domain(self, source: HostRecord, name: str, error: str) -> None: ...

    def fail_host(self, host: HostRecord, error: str) -> None: ...


@dataclass(frozen=True)
class HostPorts:
    """What a host needs from the rest of the simulated world."""

    changes: ChangeLog
    timing: SimTiming
    transaction: AbstractContextManager[None]  # timer callbacks run inside it
    deliver: Callable[[DomainEvent], None]
    migrations: MigrationHooks
    guests: SimGuests
    backups: BackupHooks


class HostRecord(Record):
    vcpus = Persisted[int]()
    memory_mib = Persisted[int]()
    up = Persisted[bool]()
    link_up = Persisted[bool]()
    armed = Persisted[ArmedFaults]()
    killed_by_failure = Persisted[tuple[str, ...]]()  # for the STOPPED events sent on host-up
    bridges = Persisted[tuple[str, ...]]()  # the Linux bridges the host has (for bridge networks)

    def __init__(
        self, ports: HostPorts, name: str, vcpus: int, memory_mib: int, bridges: tuple[str, ...] = ()
    ) -> None:
        self._ports = ports
        self.name = name
        self.uri = host_uri(name)
        self.vcpus = vcpus
        self.memory_mib = memory_mib
        self.up = True
        self.link_up = True
        self.armed = ArmedFaults()
        self.killed_by_failure = ()
        self.bridges = bridges
        self.domains: RecordMap[str, SimDomain] = RecordMap(ports.changes, Entity.DOMAIN, (name,))
        # the room live domains take, and incoming migrations hold from the moment they start
        self.used_vcpus = 0
        self.used_memory_mib = 0
        self.reserved_vcpus = 0
        self.reserved_memory_mib = 0
        self.consoles = SimConsoles()  # open console sessions: connections, never persisted

    @property
    def reachable(self) -> bool:
        return self.up and self.link_up

    def adopt(self, domain: SimDomain) -> None:
        """Take a domain as the state file holds it, with the room its live instance takes."""
        self.domains.load(domain.name, domain)
        if not domain.active:
            domain.live = None
        elif domain.live is None:
            domain.live = domain.spec
        if domain.live is not None:
            self.used_vcpus += domain.live.cpu
            self.used_memory_mib += domain.live.memory_mib

    def facts(self) -> HostFacts:
        return HostFacts(self.name, vcpus=self.vcpus, memory_mib=self.memory_mib, bridges=self.bridges)

    # ------------------------------------------------------------------ helpers

    def emit(
        self,
        event_type: DomainEventType,
        domain: SimDomain | None,
        reason: ExitReason | None = None,
        detail: str = "",
        *,
        even_if_unreachable: bool = False,
    ) -> None:
        # Events travel over the host connection: none arrive while it is away.
        if not (self.reachable or even_if_unreachable):
            return
        self._ports.deliver(
            DomainEvent(
                host_uri=self.uri,
                domain=domain.name if domain else "",
                vm_uid=domain.spec.vm_uid if domain else "",
                type=event_type,
                reason=reason,
                detail=detail,
            )
        )

    def info(self, domain: SimDomain) -> DomainInfo:
        config = domain.live or domain.spec
        return DomainInfo(
            name=domain.name,
            vm_uid=domain.spec.vm_uid,
            state=domain.state,
            exit_reason=domain.exit_reason,
            cpu=config.cpu,
            memory_mib=config.memory_mib,
        )

    def get(self, name: str) -> SimDomain:
        domain = self.domains.get(name)
        if domain is None:
            raise NotFound(f"domain {name} is not defined on {self.uri}")
        return domain

    def check_room(self, cpu: int, memory_mib: int, what: str) -> None:
        """PermanentError if it can never fit this host, TransientError if it does not fit now.

        Memory only, as on a real hypervisor: vCPUs are threads that share the cores, so
        more vCPUs than cores only run slower (the control plane's allocation ratio decides
        how many it places); memory the host does not have cannot be given out."""
        if memory_mib > self.memory_mib:
            raise PermanentError(
                f"{what} needs {memory_mib} MiB but {self.uri} has only {self.memory_mib} MiB in total"
            )
        free_memory = self.memory_mib - self.used_memory_mib - self.reserved_memory_mib
        if memory_mib > free_memory:
            raise TransientError(
                f"{self.uri} is full: {what} needs {memory_mib} MiB ({cpu} vcpus), {free_memory} MiB free"
            )

    def arm(self, kind: FaultKind, domain: str | None, count: int) -> None:
        self.armed = self.armed.arm(kind, domain, count)

    def take_fault(self, kind: FaultKind, domain: str) -> bool:
        """Spend one armed fault of ``kind`` for ``domain`` (its own first, then a host-wide one)."""
        left = self.armed.take(kind, domain)
        if left is None:
            return False
        self.armed = left
        return True

    def power_on(self, domain: SimDomain, state: DomainState, live: DomainSpec | None = None) -> None:
        """Give ``domain`` a live instance (the caller checked room)."""
        domain.live = live or domain.spec
        self.used_vcpus += domain.live.cpu
        self.used_memory_mib += domain.live.memory_mib
        domain.state = state
        domain.exit_reason = None

    def power_off(
        self,
        domain: SimDomain,
        reason: ExitReason,
        event_type: DomainEventType = DomainEventType.STOPPED,
        detail: str = "",
    ) -> None:
        """End ``domain``'s live instance now, failing its outgoing migration first."""
        self._ports.migrations.fail_domain(self, domain.name, f"domain stopped during migration ({reason})")
        domain.cancel_timer()
        self.consoles.hang_up(domain.name)
        self._ports.backups.stopped(domain)
        if domain.live is not None:
            self.used_vcpus -= domain.live.cpu
            self.used_memory_mib -= domain.live.memory_mib
            domain.live = None
        domain.state = DomainState.SHUTOFF
        domain.exit_reason = reason
        self._ports.guests.stopped(domain.name)
        self.emit(event_type, domain, reason, detail)

    def remove(self, domain: SimDomain) -> None:
        """Forget a domain (undefine, or it left by migration) without events."""
        domain.cancel_timer()
        self.consoles.hang_up(domain.name)
        if domain.live is not None:
            self.used_vcpus -= domain.live.cpu
            self.used_memory_mib -= domain.live.memory_mib
            domain.live = None
        self.domains.pop(domain.name)

    def _after(self, delay: float, finish: Callable[[SimDomain], None], domain: SimDomain) -> None:
        """Run ``finish(domain)`` as an entry point of its own in ``delay`` seconds."""
        domain.cancel_timer()
        domain.timer = asyncio.get_running_loop().call_later(delay, self._timer_fired, finish, domain)
        domain.due = self._ports.timing.clock() + delay

    def _timer_fired(self, finish: Callable[[SimDomain], None], domain: SimDomain) -> None:
        with self._ports.transaction:
            domain.timer = None
            finish(domain)
