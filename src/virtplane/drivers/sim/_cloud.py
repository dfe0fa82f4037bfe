"""``SimCloud``: the in-process world of simulated hosts, pools and domains."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import TracebackType

from virtplane.drivers.base import DomainEvent, DomainSpec, DomainState

from ._driver import SimDriver
from ._host import SimHost
from ._migration import MigrationEngine
from ._model import (
    ACTIVE_STATES,
    DOMAIN_FAULTS,
    URI_SCHEME,
    FaultKind,
    FaultRecord,
    MigrationTransition,
    SimDomain,
    SimFaultError,
    SimHostState,
    SimState,
    host_name,
)
from ._persist import SimJournal
from ._storage import SHARED, SimStorage

logger = logging.getLogger(__name__)

MEMORY_SNAPSHOT_SCHEME = "sim-mem://"


class SimCloud:
    """Simulated hosts that share pools and a migration network.

    Timers run on the asyncio loop that calls the drivers, so every call
    (driver methods, ``inject``) must come from that loop's thread, inside the
    running loop (an ``async def`` route, not a sync one run in a thread pool).
    ``clock`` stamps ``fault_log`` entries, and the end times of boots and shutdowns and
    the times of migration ticks kept in the state file (default: wall time).

    ``state_path`` (a SQLite file, created if missing) makes the world durable, like
    real hypervisors that keep running while the control plane crashes: every change
    is committed before the driver call, ``SimCloud`` method or timer that made it
    returns, writing only the rows of what changed (see ``_persist``). A new
    ``SimCloud`` on an existing file loads the world; time passed while no process ran:

    - a domain that was STARTING is RUNNING if its boot time is up by then (a boot made
      to fail by ``fail-start`` is SHUTOFF with START_FAILED once its failure time is
      up), and one that was SHUTTING_DOWN is SHUTOFF with exit reason STOPPED_BY_SYSTEM
      once its shutdown time is up. No events are sent for these (no connection was
      open); the control plane sees them in ``list_domains``/``get_info``. A transition
      whose time is not up yet resumes for the time left on the first driver call or
      ``inject`` made inside a running loop, or on ``await cloud.resume()``.
    - a migration in flight went on, as libvirt's goes on without its client: it advanced
      by the ticks that fit in the time since its last one, and is switched over (the
      domain on the target, gone from the source, no job left), failed at an injected
      fault, stalled, or still running, resuming with its timer like a boot. Its job is
      queryable and abortable and its room on the target stays held.
    - hosts (capacity, down or disconnected), domains with definition, live config,
      exit reason, memory marker, pools, volumes with content, volume snapshots, saved
      memory, armed faults with their counts and dirty rates are as they were.

    Not kept: ``fault_log`` and the constructor's timing arguments (pass them again).
    Without ``state_path`` everything stays in memory.
    """

    def __init__(
        self,
        *,
        boot_seconds: float = 1.5,
        shutdown_seconds: float = 0.5,
        link_mib_s: float = 1000.0,
        clock: Callable[[], float] | None = None,
        time_scale: float = 1.0,
        migration_tick_s: float = 0.05,
        state_path: Path | str | None = None,
    ) -> None:
        """``time_scale`` is how many simulated seconds of migration one loop second is worth."""
        if min(boot_seconds, shutdown_seconds) < 0 or link_mib_s <= 0:
            raise ValueError("delays must be >= 0 and the link bandwidth > 0")
        if time_scale <= 0 or migration_tick_s <= 0:
            raise ValueError("time_scale and migration_tick_s must be > 0")
        self.boot_seconds = boot_seconds
        self.shutdown_seconds = shutdown_seconds
        self.link_mib_s = link_mib_s
        self.time_scale = time_scale
        self.migration_tick_s = migration_tick_s
        self.clock = clock or time.time
        self.fault_log: list[FaultRecord] = []
        self.storage = SimStorage(self)
        self.migrations = MigrationEngine(self)
        self._hosts: dict[str, SimHost] = {}
        self._drivers: dict[str, SimDriver] = {}
        self._dirty_rates: dict[str, float] = {}
        self._saved_memory: dict[str, tuple[DomainSpec, str]] = {}
        # boots and shutdowns loaded from the state file that still wait for a timer
        self._unresumed: list[tuple[SimHost, SimDomain]] = []
        self.journal: SimJournal | None = None
        self.transaction: AbstractContextManager[None] = nullcontext()
        """Every entry point (driver call, public method, timer callback) runs inside it;
        with a state file the outermost one commits the changes it made."""
        if state_path is not None:
            journal = SimJournal(Path(state_path))
            self.journal = journal
            self.transaction = _Transaction(self, journal)
            with self.transaction:
                self._load(journal)

    # ------------------------------------------------------------------ the state file

    def _load(self, journal: SimJournal) -> None:
        for host in journal.load_hosts(self):
            self._hosts[host.name] = host
        self.migrations.load(journal.load_migrations(self))
        for owner, domain in journal.load_domains():
            found = self._hosts.get(owner)
            if found is None:
                continue
            host = found
            host.domains[domain.name] = domain
            if domain.state not in ACTIVE_STATES:
                domain.live = None
            elif domain.live is None:
                domain.live = domain.spec
            if domain.live is not None:
                host.used_vcpus += domain.live.cpu
                host.used_memory_mib += domain.live.memory_mib
            if domain.state is DomainState.MIGRATING and not self.migrations.running_from(host, domain.name):
                # a file written before migrations were stored: the job is gone, the domain stays
                domain.state = domain.state_before_migration or DomainState.RUNNING
                domain.state_before_migration = None
                host.changed(domain)
            elif domain.state in (DomainState.STARTING, DomainState.SHUTTING_DOWN):
                self._unresumed.append((host, domain))
        self.storage.load(journal.load_pools(), journal.load_snapshots())
        self._saved_memory = journal.load_saved_memory()
        self._dirty_rates = journal.load_dirty_rates()
        self.resume_transitions()

    def resume_transitions(self) -> None:
        """Finish loaded boots, shutdowns and migrations as far as their time is up; inside a
        running loop, give the others timers for the time they have left."""
        if not (self._unresumed or self.migrations.unresumed):
            return
        try:
            asyncio.get_running_loop()
            can_wait = True
        except RuntimeError:
            can_wait = False
        now = self.clock()
        self._unresumed = [
            (host, domain)
            for host, domain in self._unresumed
            if not host.resume_transition(domain, now, can_wait=can_wait)
        ]
        self.migrations.resume(now, can_wait=can_wait)

    async def resume(self) -> None:
        """Resume loaded boots, shutdowns and migrations now (any driver call does it too)."""
        with self.transaction:
            self.resume_transitions()

    def close(self) -> None:
        """Commit what is pending and close the state file; later changes stay in memory."""
        journal = self.journal
        if journal is None:
            return
        journal.flush(self)
        journal.close()
        self.journal = None
        self.transaction = nullcontext()

    # ------------------------------------------------------------------ hosts and drivers

    def add_host(self, name: str, vcpus: int, memory_mib: int) -> str:
        """Add a host; returns its URI ``sim://NAME``."""
        if not name or "/" in name:
            raise ValueError(f"invalid simulated host name {name!r}")
        if name in self._hosts:
            raise ValueError(f"simulated host {name} exists already")
        if vcpus < 1 or memory_mib < 1:
            raise ValueError("a host needs at least one vcpu and some memory")
        with self.transaction:
            host = self._hosts[name] = SimHost(self, name, vcpus, memory_mib)
            host.changed()
        return host.uri

    @property
    def host_names(self) -> list[str]:
        return list(self._hosts)

    def driver(self, uri: str) -> SimDriver:
        """The connection to host ``uri`` (the same object for the same host)."""
        if not uri.startswith(URI_SCHEME):
            raise ValueError(f"{uri!r} is not a simulated host URI (sim://NAME)")
        canonical = URI_SCHEME + host_name(uri)
        driver = self._drivers.get(canonical)
        if driver is None:
            driver = self._drivers[canonical] = SimDriver(self, canonical)
        return driver

    # The next few methods serve the simulator's own modules.

    def host_named(self, name: str) -> SimHost | None:
        return self._hosts.get(name)

    def host_by_uri(self, uri: str) -> SimHost | None:
        return self._hosts.get(host_name(uri)) if uri.startswith(URI_SCHEME) else None

    def deliver(self, event: DomainEvent) -> None:
        driver = self._drivers.get(event.host_uri)
        # a closed connection carries no events
        sink = driver.event_sink if driver is not None and driver.is_open else None
        if sink is None:
            return
        try:
            sink(event)
        except Exception:  # a faulty sink must not corrupt the simulated world
            logger.exception("event sink failed on %s", event)

    # ------------------------------------------------------------------ faults

    def inject(
        self, host: str, kind: FaultKind | str, domain: str | None = None, count: int = 1
    ) -> FaultRecord:
        """Inject a fault on ``host`` (a name or ``sim://NAME``); see the package docstring."""
        with self.transaction:
            return self._inject(host, FaultKind(kind), domain, count)

    def _inject(self, host: str, kind: FaultKind, domain: str | None, count: int) -> FaultRecord:
        target = self._hosts.get(host_name(host))
        if target is None:
            raise SimFaultError(f"no simulated host {host}")
        if count < 1:
            raise SimFaultError("count must be at least 1")
        if kind in DOMAIN_FAULTS and not domain:
            raise SimFaultError(f"fault {kind} needs a domain")
        record = FaultRecord(self.clock(), target.name, kind, domain, count)
        if kind in (FaultKind.FAIL_START, FaultKind.FAIL_MIGRATION, FaultKind.STALL_MIGRATION):
            armed = {
                FaultKind.FAIL_START: target.fail_starts,
                FaultKind.FAIL_MIGRATION: target.fail_migrations,
                FaultKind.STALL_MIGRATION: target.stall_migrations,
            }[kind]
            armed[domain] = armed.get(domain, 0) + count
            target.changed()
        elif kind in DOMAIN_FAULTS and not target.up:
            raise SimFaultError(f"host {target.name} is down: its domains are not running")
        elif kind is FaultKind.GUEST_SHUTDOWN:
            target.guest_shutdown(str(domain))
        elif kind is FaultKind.GUEST_RESET:
            target.guest_reset(str(domain))
        elif kind is FaultKind.CRASH:
            target.crash(str(domain))
        elif kind is FaultKind.HOST_DOWN:
            target.go_down()
        elif kind is FaultKind.HOST_UP:
            target.come_up()
        elif kind is FaultKind.DISCONNECT:
            target.link_up = False
            target.changed()
        elif kind is FaultKind.RECONNECT:
            target.link_up = True
            target.changed()
        self.fault_log.append(record)
        return record

    def armed_faults(self, host: str) -> dict[FaultKind, dict[str | None, int]]:
        """Faults waiting for their trigger on ``host``: kind → {domain or None: times left}."""
        target = self._hosts.get(host_name(host))
        if target is None:
            raise SimFaultError(f"no simulated host {host}")
        return {
            FaultKind.FAIL_START: dict(target.fail_starts),
            FaultKind.FAIL_MIGRATION: dict(target.fail_migrations),
            FaultKind.STALL_MIGRATION: dict(target.stall_migrations),
        }

    def set_dirty_rate(self, domain: str, mib_s: float) -> None:
        """How fast ``domain``'s guest dirties memory (it follows the domain across hosts)."""
        if mib_s < 0:
            raise ValueError("a dirty rate cannot be negative")
        with self.transaction:
            self._dirty_rates[domain] = mib_s
            if self.journal is not None:
                self.journal.mark_dirty_rate(domain)

    def dirty_rate(self, domain: str) -> float:
        return self._dirty_rates.get(domain, 0.0)

    # ------------------------------------------------------------------ sim-only content helpers

    def write_volume(self, path: str, content: str, *, host: str | None = None) -> None:
        """Set a volume's content (what the guest wrote). ``host`` picks among same-path local volumes."""
        with self.transaction:
            self.storage.write_content(path, host_name(host) if host else None, content)

    def put_image_file(
        self, pool: str, file: str, content: str, *, host: str | None = None, size_gib: int = 1
    ) -> None:
        """Place a file in a library pool, as an admin copies one onto a host (``host``: a local pool)."""
        with self.transaction:
            self.storage.put_image_file(host_name(host) if host else SHARED, pool, file, content, size_gib)

    def read_volume(self, path: str, *, host: str | None = None) -> str:
        return self.storage.resolve(path, host_name(host) if host else None).content

    def read_memory(self, domain: str) -> str:
        """A marker of the live guest's memory: new on every boot, carried by migration and restore."""
        return self._live_instance(domain)[1].memory

    def write_memory(self, domain: str, content: str) -> None:
        with self.transaction:
            host, found = self._live_instance(domain)
            found.memory = content
            host.changed(found)

    def _live_instance(self, domain: str) -> tuple[SimHost, SimDomain]:
        for host in self._hosts.values():
            found = host.domains.get(domain)
            if found is not None and found.active:
                return host, found
        raise SimFaultError(f"domain {domain} is not running anywhere")

    def save_memory(self, handle: str, spec: DomainSpec, memory: str) -> None:
        with self.transaction:
            self._saved_memory[handle] = (spec, memory)
            if self.journal is not None:
                self.journal.mark_memory(handle)

    def saved_memory(self, handle: str) -> tuple[DomainSpec, str] | None:
        return self._saved_memory.get(handle)

    def forget_memory(self, handle: str) -> None:
        with self.transaction:
            if self._saved_memory.pop(handle, None) is not None and self.journal is not None:
                self.journal.mark_memory(handle)

    # ------------------------------------------------------------------ read helpers for invariants

    def live_user_of(self, host: str, path: str) -> str | None:
        """The live domain on ``host`` that has disk ``path`` attached, if any."""
        target = self._hosts.get(host)
        if target is None:
            return None
        for domain in target.domains.values():
            if domain.live is not None and any(d.path == path for d in domain.live.disks):
                return domain.name
        return None

    def active_hosts(self, domain: str) -> list[str]:
        """Hosts where ``domain`` has a live instance; more than one means a split brain."""
        return sorted(
            name
            for name, host in self._hosts.items()
            if (found := host.domains.get(domain)) is not None and found.active
        )

    def migration_record(self) -> list[MigrationTransition]:
        """Every migration start and end since this cloud was built, in the order they happened
        (the last ``MigrationEngine.RECORD_LIMIT``; not kept in the state file). A refused
        migration starts and ends at once; each start has exactly one end once it is over."""
        return list(self.migrations.record)

    def snapshot_state(self) -> SimState:
        return SimState(
            hosts={
                name: SimHostState(
                    name=name,
                    uri=host.uri,
                    up=host.up,
                    connected=host.link_up,
                    vcpus=host.vcpus,
                    memory_mib=host.memory_mib,
                    used_vcpus=host.used_vcpus,
                    used_memory_mib=host.used_memory_mib,
                    domains={d.name: d.state for d in host.domains.values()},
                )
                for name, host in self._hosts.items()
            }
        )


class _Transaction:
    """Reentrant: the outermost entry point resumes loaded transitions on the way in
    and commits every marked change on the way out (also when it raised)."""

    def __init__(self, cloud: SimCloud, journal: SimJournal) -> None:
        self._cloud = cloud
        self._journal = journal

    def __enter__(self) -> None:
        journal = self._journal
        journal.depth += 1
        if journal.depth == 1:
            try:
                self._cloud.resume_transitions()
            except BaseException:
                self.__exit__(None, None, None)
                raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        journal = self._journal
        journal.depth -= 1
        if journal.depth == 0:
            journal.flush(self._cloud)
