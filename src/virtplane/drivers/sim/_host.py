"""One simulated host: its domains, their state machine and timers, capacity and host faults.

Every state change goes through this class so that capacity counters, timers and
events stay consistent. Timers exist only for domains in a transition (booting,
shutting down); a steady domain costs one dict entry. A host reaches the rest of
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
from ._model import ArmedFaults, FaultKind, SimDomain, SimFaultError, SimTiming, host_uri

FAILED_BOOT_FRACTION = 0.5
"""A start that is made to fail dies after this share of the boot time."""


class MigrationHooks(Protocol):
    """What a host tells the migrations when its domains or the host itself stop."""

    def fail_domain(self, source: SimHost, name: str, error: str) -> None: ...

    def fail_host(self, host: SimHost, error: str) -> None: ...


@dataclass(frozen=True)
class HostPorts:
    """What a host needs from the rest of the simulated world."""

    changes: ChangeLog
    timing: SimTiming
    transaction: AbstractContextManager[None]  # timer callbacks run inside it
    deliver: Callable[[DomainEvent], None]
    migrations: MigrationHooks


class SimHost(Record):
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
        if domain.live is not None:
            self.used_vcpus -= domain.live.cpu
            self.used_memory_mib -= domain.live.memory_mib
            domain.live = None
        domain.state = DomainState.SHUTOFF
        domain.exit_reason = reason
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

    # ------------------------------------------------------------------ lifecycle

    def define(self, spec: DomainSpec) -> SimDomain:
        for nic in spec.nics:  # as QEMU, which cannot open a tap on a bridge that is not there
            if nic.bridge is not None and nic.bridge not in self.bridges:
                raise PermanentError(f"network {nic.network}: bridge {nic.bridge} is not on host {self.name}")
        domain = self.domains.get(spec.name)
        if domain is None:
            domain = self.domains.put(spec.name, SimDomain(spec))
            self.emit(DomainEventType.DEFINED, domain)
        elif domain.spec != spec:
            # Like libvirt's persistent config: a running instance keeps its live config.
            domain.spec = spec
            self.emit(DomainEventType.DEFINED, domain, detail="updated")
        return domain

    def undefine(self, name: str) -> None:
        domain = self.domains.get(name)
        if domain is None:
            return
        if domain.active:
            raise PermanentError(f"domain {name} is {domain.state}: stop it before undefining it")
        self.remove(domain)
        self.emit(DomainEventType.UNDEFINED, domain)

    def start(self, name: str) -> None:
        domain = self.get(name)
        if domain.state is DomainState.SHUTTING_DOWN:
            raise TransientError(f"domain {name} is shutting down; start it once it is off")
        if domain.active:
            return
        self.check_room(domain.spec.cpu, domain.spec.memory_mib, f"domain {name}")
        fail = self.take_fault(FaultKind.FAIL_START, name)
        self.power_on(domain, DomainState.STARTING)
        domain.boots += 1
        domain.memory = f"{name}:boot-{domain.boots}"
        self.emit(DomainEventType.STARTED, domain, detail="booting")
        self._schedule_boot(domain, fail=fail)

    def _schedule_boot(self, domain: SimDomain, *, fail: bool, delay: float | None = None) -> None:
        """Boot ``domain`` (STARTING) for ``delay`` (default: the whole boot time) more seconds."""
        if delay is None:
            delay = self._ports.timing.boot_seconds * (FAILED_BOOT_FRACTION if fail else 1.0)
        self._after(delay, self.fail_boot if fail else self.finish_boot, domain)
        domain.boot_fails = fail

    def finish_boot(self, domain: SimDomain) -> None:
        if domain.state is DomainState.STARTING:
            domain.state = DomainState.RUNNING
            self.emit(DomainEventType.STARTED, domain, detail="booted")

    def fail_boot(self, domain: SimDomain) -> None:
        if domain.state is DomainState.STARTING:
            self.power_off(
                domain, ExitReason.START_FAILED, DomainEventType.CRASHED, "died while booting (injected)"
            )

    def shutdown(self, name: str) -> None:
        domain = self.get(name)
        if domain.state not in (DomainState.STARTING, DomainState.RUNNING, DomainState.MIGRATING):
            # off already, shutting down, or paused (a paused guest cannot see the ACPI event;
            # the caller's grace period runs out and it destroys the domain, as with libvirt)
            return
        self._ports.migrations.fail_domain(self, name, "the guest was shut down during migration")
        domain.state = DomainState.SHUTTING_DOWN
        self._after(self._ports.timing.shutdown_seconds, self.finish_shutdown, domain)

    def finish_shutdown(self, domain: SimDomain) -> None:
        if domain.state is DomainState.SHUTTING_DOWN:
            self.power_off(domain, ExitReason.STOPPED_BY_SYSTEM, detail="graceful shutdown")

    def resume_transition(self, domain: SimDomain, now: float, *, can_wait: bool) -> bool:
        """Finish a boot or shutdown that a previous process left under way (state loaded from
        the state file): at once if its time is up, else (``can_wait``: a loop is running) with a
        timer for the rest. False if it still needs a timer, which needs a running loop."""
        if domain.timer is not None or self.domains.get(domain.name) is not domain:
            return True
        remaining = domain.due - now
        if domain.state is DomainState.STARTING:
            if remaining <= 0:
                (self.fail_boot if domain.boot_fails else self.finish_boot)(domain)
            elif can_wait:
                self._schedule_boot(domain, fail=domain.boot_fails, delay=remaining)
            else:
                return False
        elif domain.state is DomainState.SHUTTING_DOWN:
            if remaining <= 0:
                self.finish_shutdown(domain)
            elif can_wait:
                self._after(remaining, self.finish_shutdown, domain)
            else:
                return False
        return True

    def destroy(self, name: str) -> None:
        domain = self.domains.get(name)
        if domain is None or not domain.active:
            return
        self.power_off(domain, ExitReason.STOPPED_BY_SYSTEM, detail="destroyed")

    def pause(self, name: str) -> None:
        domain = self.get(name)
        if domain.state is DomainState.PAUSED:
            return
        self._require_steady(domain, "pause")
        domain.state = DomainState.PAUSED
        self.emit(DomainEventType.PAUSED, domain)

    def resume(self, name: str) -> None:
        domain = self.get(name)
        if domain.state is DomainState.RUNNING:
            return
        if domain.state is not DomainState.PAUSED:
            self._require_steady(domain, "resume")
        domain.state = DomainState.RUNNING
        self.emit(DomainEventType.RESUMED, domain)

    def _require_steady(self, domain: SimDomain, action: str) -> None:
        if domain.state is DomainState.RUNNING:
            return
        if domain.active:
            raise TransientError(f"cannot {action} domain {domain.name} while it is {domain.state}")
        raise PermanentError(f"cannot {action} domain {domain.name}: it is not running")

    def restore(self, spec: DomainSpec, memory: str) -> None:
        """Define ``spec`` and bring it up RUNNING at once with the saved memory."""
        existing = self.domains.get(spec.name)
        if existing is not None and existing.active:
            raise PermanentError(f"domain {spec.name} is {existing.state}: stop it before restoring memory")
        self.check_room(spec.cpu, spec.memory_mib, f"domain {spec.name}")
        domain = self.define(spec)
        self.power_on(domain, DomainState.RUNNING)
        domain.memory = memory
        self.emit(DomainEventType.STARTED, domain, detail="restored from saved memory")

    # ------------------------------------------------------------------ guest faults

    def guest_shutdown(self, name: str) -> None:
        domain = self._live_guest(name, "power itself off")
        self.power_off(domain, ExitReason.GUEST_SHUTDOWN, detail="the guest powered off")

    def guest_reset(self, name: str) -> None:
        domain = self._live_guest(name, "reset itself")
        self.emit(DomainEventType.RESET, domain, ExitReason.GUEST_RESET)
        if domain.state is DomainState.MIGRATING:
            return  # a reset does not stop the migration; memory is dirtied either way
        domain.boots += 1
        domain.memory = f"{name}:boot-{domain.boots}"
        domain.state = DomainState.STARTING
        self._schedule_boot(domain, fail=False)

    def crash(self, name: str) -> None:
        domain = self.domains.get(name)
        if domain is None or not domain.active:
            raise SimFaultError(f"domain {name} is not running on {self.uri}: it cannot crash")
        self.power_off(domain, ExitReason.CRASH, DomainEventType.CRASHED, "the guest crashed")

    def _live_guest(self, name: str, action: str) -> SimDomain:
        domain = self.domains.get(name)
        if domain is None or not domain.active or domain.state is DomainState.PAUSED:
            state = domain.state if domain else "not defined"
            raise SimFaultError(f"domain {name} on {self.uri} is {state}: it cannot {action}")
        return domain

    # ------------------------------------------------------------------ host faults

    def go_down(self) -> None:
        if not self.up:
            return
        self._ports.migrations.fail_host(self, "host went down")
        self.up = False
        for domain in list(self.domains.values()):
            if domain.active:
                self.power_off(domain, ExitReason.HOST_FAILURE)  # unreachable: no event now
                self.killed_by_failure = (*self.killed_by_failure, domain.name)
        self.emit(DomainEventType.HOST_DOWN, None, ExitReason.HOST_FAILURE, even_if_unreachable=True)

    def come_up(self) -> None:
        if self.up:
            return
        self.up = True
        self.emit(DomainEventType.HOST_UP, None)
        # Tell the control plane now what it could not hear while the host was down.
        for name in self.killed_by_failure:
            domain = self.domains.get(name)
            if domain is not None and domain.exit_reason is ExitReason.HOST_FAILURE:
                self.emit(DomainEventType.STOPPED, domain, ExitReason.HOST_FAILURE, "host failure")
        self.killed_by_failure = ()
