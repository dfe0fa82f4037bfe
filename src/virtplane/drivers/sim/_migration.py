"""Running the live migrations (``_precopy``) of the simulated world.

Time advances in ticks of ``timing.migration_tick_s`` loop seconds, each worth
``migration_tick_s * time_scale`` simulated seconds, so tests can run a
many-gigabyte migration in a few milliseconds. Ticks fall on a grid from the
migration's start, as a real copy runs on its own time: a busy loop runs a tick late,
then the ones it held back, and the copy ends when the link model says. Each tick
stamps the job with the clock's time, from which a later process replays the ticks it
missed (the package docstring, "Restarts", says what a restart keeps).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    DomainEventType,
    DomainSpec,
    DomainState,
    MigrationJob,
    MigrationPhase,
    MigrationRequest,
)
from virtplane.drivers.errors import DriverError, NotFound, PermanentError, TransientError

from ._changes import ChangeLog, Entity, RecordMap
from ._model import FaultKind, MigrationTransition, SimDomain, SimTiming
from ._precopy import DiskCopy, InjectedFault, Migration

if TYPE_CHECKING:
    from ._host import SimHost
    from ._host_record import HostRecord
    from ._storage import SimStorage


class HostLookup(Protocol):
    def host_by_uri(self, uri: str) -> SimHost | None: ...


class MigrationEngine:
    """Runs the world's migrations; at most one job per domain is kept (the latest)."""

    RECORD_LIMIT = 100_000
    """Transitions kept in ``record`` (the oldest go first): ample for any test, bounded for a demo."""

    def __init__(
        self,
        changes: ChangeLog,
        *,
        hosts: HostLookup,
        storage: SimStorage,
        timing: SimTiming,
        dirty_rate: Callable[[str], float],
        transaction: AbstractContextManager[None],
    ) -> None:
        self._hosts = hosts
        self._storage = storage
        self._timing = timing
        self._dirty_rate = dirty_rate
        self._transaction = transaction  # timer callbacks run inside it
        self._jobs: RecordMap[str, Migration] = RecordMap(changes, Entity.MIGRATION)
        # running migrations loaded from the state file that still wait for a timer
        self._unresumed: list[Migration] = []
        self.record: deque[MigrationTransition] = deque(maxlen=self.RECORD_LIMIT)

    def latest(self, domain: str) -> Migration | None:
        """The last job of ``domain``, whatever its phase."""
        return self._jobs.get(domain)

    # ------------------------------------------------------------------ driver entry points

    def start(self, source: SimHost, request: MigrationRequest) -> None:
        domain = source.get(request.domain)
        if domain.state not in (DomainState.RUNNING, DomainState.PAUSED):
            if domain.active:
                raise TransientError(f"domain {domain.name} is {domain.state}; migrate it once it is running")
            raise PermanentError(f"domain {domain.name} is not running: there is nothing to live-migrate")
        target = self._hosts.host_by_uri(request.target_uri)
        if target is None:
            raise PermanentError(f"unknown migration target {request.target_uri}")
        if target is source:
            raise PermanentError(f"cannot migrate domain {domain.name} to the host it runs on")
        disks = self._disks_to_copy(source, request)
        live = domain.live or domain.spec
        bandwidth = self._timing.link_mib_s
        if request.bandwidth_mib_s is not None:
            bandwidth = min(bandwidth, float(request.bandwidth_mib_s))
        migration = Migration(
            domain=domain.name,
            vm_uid=domain.spec.vm_uid,
            source=source,
            target=target,
            bandwidth_mib_s=bandwidth,
            memory_mib=float(live.memory_mib),
            disks=disks,
            fault=None,
            auto_converge=request.auto_converge,
            post_copy_allowed=request.post_copy,
            max_downtime_ms=request.max_downtime_ms,
        )
        migration.progressed_at = self._timing.clock()
        self._jobs.put(domain.name, migration)
        self._note(migration, None)
        refusal = self._target_refusal(
            migration, live.cpu, live.memory_mib, tuple(d.path for d in live.disks)
        )
        if refusal:
            self._finish(migration, MigrationPhase.FAILED, refusal)
            return
        # armed faults are spent only on migrations that really start
        if source.take_fault(FaultKind.FAIL_MIGRATION, domain.name):
            migration.fault = InjectedFault.FAIL
        elif source.take_fault(FaultKind.STALL_MIGRATION, domain.name):
            migration.fault = InjectedFault.STALL
        migration.reserved = (live.cpu, live.memory_mib)
        target.reserved_vcpus += live.cpu
        target.reserved_memory_mib += live.memory_mib
        domain.state_before_migration = domain.state
        domain.state = DomainState.MIGRATING
        self._schedule(migration)

    def job(self, host: SimHost, name: str) -> MigrationJob | None:
        migration = self._jobs.get(name)
        if migration is None or host not in (migration.source, migration.target):
            return None
        return migration.job()

    def abort(self, host: SimHost, name: str) -> None:
        migration = self._jobs.get(name)
        if migration is None or host not in (migration.source, migration.target):
            raise NotFound(f"no migration of domain {name} on {host.uri}")
        if migration.phase is MigrationPhase.RUNNING:
            if migration.post_copy:
                # as libvirt: the guest runs on the target with part of its memory still here
                raise PermanentError(f"cannot abort the migration of {name}: it is in post-copy")
            self._finish(migration, MigrationPhase.ABORTED, "aborted on request")

    def start_post_copy(self, host: SimHost, name: str) -> None:
        migration = self._jobs.get(name)
        if migration is None or migration.source is not host or migration.phase is not MigrationPhase.RUNNING:
            raise NotFound(f"no migration of domain {name} running from {host.uri}")
        if not migration.post_copy_allowed:
            raise PermanentError(f"the migration of {name} was not started with post-copy allowed")
        if migration.stalled:
            return  # an injected stall: nothing moves, in either mode
        migration.switch_to_post_copy()

    # ------------------------------------------------------------------ hooks for faults and stops

    def fail_domain(self, source: HostRecord, name: str, error: str) -> None:
        migration = self._jobs.get(name)
        if migration is not None and migration.source is source and migration.phase is MigrationPhase.RUNNING:
            self._finish(migration, MigrationPhase.FAILED, error)

    def fail_host(self, host: HostRecord, error: str) -> None:
        for migration in list(self._jobs.values()):
            if migration.phase is MigrationPhase.RUNNING and host in (migration.source, migration.target):
                self._finish(migration, MigrationPhase.FAILED, f"{error}: {host.uri}")

    # ------------------------------------------------------------------ after a restart

    def load(self, migrations: list[Migration]) -> None:
        """Take over the jobs a previous process stored; the running ones hold their room on
        the target again and wait for ``resume``."""
        for migration in migrations:
            self._jobs.load(migration.domain, migration)
            if migration.phase is MigrationPhase.RUNNING:
                cpu, memory = migration.reserved
                migration.target.reserved_vcpus += cpu
                migration.target.reserved_memory_mib += memory
                self._unresumed.append(migration)

    def running_from(self, source: SimHost, name: str) -> bool:
        migration = self._jobs.get(name)
        return (
            migration is not None and migration.source is source and migration.phase is MigrationPhase.RUNNING
        )

    def resume(self, now: float, *, can_wait: bool) -> None:
        """Advance loaded migrations by the ticks that fell between their last tick and ``now``;
        inside a running loop (``can_wait``), give those still running their timers."""
        self._unresumed = [m for m in self._unresumed if not self._catch_up(m, now, can_wait=can_wait)]

    @property
    def unresumed(self) -> bool:
        return bool(self._unresumed)

    def _catch_up(self, migration: Migration, now: float, *, can_wait: bool) -> bool:
        """False while the migration still needs a timer, which needs a running loop."""
        if migration.phase is not MigrationPhase.RUNNING or migration.timer is not None:
            return True
        source_domain = migration.source.domains.get(migration.domain)
        if source_domain is None or source_domain.state is not DomainState.MIGRATING:
            self._finish(migration, MigrationPhase.FAILED, "the domain left the source during migration")
            return True
        down = next((h for h in (migration.source, migration.target) if not h.up), None)
        if down is not None:
            self._finish(migration, MigrationPhase.FAILED, f"host went down: {down.uri}")
            return True
        if migration.stalled:
            return True
        tick_s = self._timing.migration_tick_s
        # whole ticks only: the part of a tick left over counts towards the next one
        while now - migration.progressed_at >= tick_s:
            migration.progressed_at += tick_s
            if not self._step(migration):
                if migration.job().phase is MigrationPhase.COMPLETED:
                    # it ended unseen: as with libvirt, no job is left once the source domain is gone
                    self._jobs.pop(migration.domain)
                return True
        if not can_wait:
            return False
        last_tick = asyncio.get_running_loop().time() - (now - migration.progressed_at)  # in loop time
        self._schedule(migration, after=last_tick)
        return True

    # ------------------------------------------------------------------ internals

    def _disks_to_copy(self, source: SimHost, request: MigrationRequest) -> tuple[DiskCopy, ...]:
        sizes_from_spec = {d.path: d.size_gib for d in request.spec.disks} if request.spec else {}
        copies: list[DiskCopy] = []
        for path in request.copy_disks:
            located = self._storage.locate_local(source.name, path)
            if located is not None:
                pool, volume = located
                if pool.shared:
                    continue  # shared disks are visible on the target already
                copies.append(DiskCopy(path, pool.name, volume.name, volume.size_gib, volume.content))
                continue
            pool_name, volume_name = self._storage.split_path(path)
            size_gib = sizes_from_spec.get(path, 0)
            if size_gib <= 0:
                raise PermanentError(f"disk {path} to copy is not a volume on {source.uri}")
            copies.append(DiskCopy(path, pool_name, volume_name, size_gib, ""))
        return tuple(copies)

    def _target_refusal(
        self, migration: Migration, cpu: int, memory_mib: int, disk_paths: tuple[str, ...]
    ) -> str:
        target = migration.target
        if not target.up:
            return f"target {target.uri} is unreachable"
        present = target.domains.get(migration.domain)
        if present is not None and present.active:
            return f"domain {migration.domain} is already {present.state} on {target.uri}"
        unreachable = self._storage.disks_missing_on(
            target.name, migration.source.name, disk_paths, {d.path for d in migration.disks}
        )
        if unreachable:
            return (
                f"{target.uri} cannot reach disk(s) {', '.join(unreachable)} (not copied, not shared with it)"
            )
        try:
            target.check_room(cpu, memory_mib, f"domain {migration.domain}")
            self._storage.check_copy_room(target.name, migration.disks)
        except DriverError as exc:
            return f"target cannot take the domain: {exc}"
        return ""

    def _current(self, source: SimHost, disks: tuple[DiskCopy, ...]) -> tuple[DiskCopy, ...]:
        current = []
        for disk in disks:
            located = self._storage.locate_local(source.name, disk.path)
            content = located[1].content if located is not None else disk.content
            current.append(DiskCopy(disk.path, disk.pool, disk.volume, disk.size_gib, content))
        return tuple(current)

    def _schedule(self, migration: Migration, after: float | None = None) -> None:
        """The next tick, one tick after ``after`` (loop time; default now). A tick passes the
        time it was due: a copy runs on its own time, so a busy control plane delays a tick,
        never the copy."""
        loop = asyncio.get_running_loop()
        due = (loop.time() if after is None else after) + self._timing.migration_tick_s
        migration.timer = loop.call_at(due, self._tick, migration, due)

    def _tick(self, migration: Migration, due: float) -> None:
        with self._transaction:
            migration.timer = None
            migration.progressed_at = self._timing.clock()
            if self._step(migration):
                self._schedule(migration, after=due)

    def _step(self, migration: Migration) -> bool:
        """One tick of progress; True while the migration needs more ticks."""
        if migration.phase is not MigrationPhase.RUNNING:
            return False
        source_domain = migration.source.domains.get(migration.domain)
        paused = source_domain is not None and source_domain.state_before_migration is DomainState.PAUSED
        dirty_rate = 0.0 if paused else self._dirty_rate(migration.domain)
        seconds = self._timing.migration_tick_s * self._timing.time_scale
        converged = migration.advance(seconds, dirty_rate)
        if converged:
            self._switch_over(migration)
            return False
        if migration.at_fault_point():
            if migration.fault is InjectedFault.FAIL:
                self._finish(migration, MigrationPhase.FAILED, "migration failed half way (injected fault)")
            else:
                migration.stalled = True  # no more ticks: no progress until aborted
            return False
        return True

    def _note(self, migration: Migration, outcome: MigrationPhase | None) -> None:
        self.record.append(
            MigrationTransition(
                self._timing.clock(), migration.domain, migration.source.name, migration.target.name, outcome
            )
        )

    def _release(self, migration: Migration) -> None:
        cpu, memory = migration.reserved
        migration.target.reserved_vcpus -= cpu
        migration.target.reserved_memory_mib -= memory
        migration.reserved = (0, 0)
        if migration.timer is not None:
            migration.timer.cancel()
            migration.timer = None

    def _finish(self, migration: Migration, phase: MigrationPhase, error: str) -> None:
        """End a migration that did not switch over: the domain stays where it was, unless it
        was in post-copy: then its memory is split between two hosts and the guest is lost."""
        self._release(migration)
        migration.phase = phase
        migration.error = f"{error} (during post-copy: the guest is lost)" if migration.post_copy else error
        self._note(migration, phase)
        domain = migration.source.domains.get(migration.domain)
        if domain is not None and domain.state is DomainState.MIGRATING:
            domain.state = domain.state_before_migration or DomainState.RUNNING
            domain.state_before_migration = None
        migration.source.emit(
            DomainEventType.MIGRATION_FAILED, domain or _placeholder(migration), detail=f"{phase}: {error}"
        )
        if migration.post_copy and domain is not None and domain.active and migration.source.up:
            migration.source.power_off(domain, ExitReason.CRASH, DomainEventType.CRASHED, migration.error)

    def _switch_over(self, migration: Migration) -> None:
        source, target = migration.source, migration.target
        domain = source.domains.get(migration.domain)
        if domain is None or domain.state is not DomainState.MIGRATING:
            self._finish(migration, MigrationPhase.FAILED, "the domain left the source during migration")
            return
        self._release(migration)
        live = domain.live or domain.spec
        present = target.domains.get(domain.name)
        if present is not None and present.active:
            self._finish(migration, MigrationPhase.FAILED, f"domain {domain.name} came up on {target.uri}")
            return
        try:
            target.check_room(live.cpu, live.memory_mib, f"domain {domain.name}")
            # writes made during the copy were mirrored: the target gets the disks as they are now
            self._storage.land_copies(target.name, self._current(source, migration.disks))
        except DriverError as exc:
            self._finish(migration, MigrationPhase.FAILED, f"switch-over failed: {exc}")
            return
        run_state = domain.state_before_migration or DomainState.RUNNING
        source.remove(domain)
        migration.phase = MigrationPhase.COMPLETED
        self._note(migration, MigrationPhase.COMPLETED)
        source.emit(DomainEventType.MIGRATED, domain, detail=f"to {target.uri}")
        arrived = target.define(domain.spec)
        target.power_on(arrived, run_state, live)
        arrived.memory = domain.memory
        arrived.boots = domain.boots
        target.emit(DomainEventType.STARTED, arrived, detail=f"migrated from {source.uri}")


def _placeholder(migration: Migration) -> SimDomain:
    """Stands in for a domain that is gone from the source, so that the failure event can be sent."""
    spec = DomainSpec(name=migration.domain, vm_name="", vm_uid=migration.vm_uid, cpu=0, memory_mib=0)
    return SimDomain(spec=spec)
