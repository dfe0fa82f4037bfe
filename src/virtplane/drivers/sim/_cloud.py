"""``SimCloud``: the in-process world of simulated hosts, pools and domains."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from virtplane.drivers.base import DomainEvent, DomainEventType, DomainSpec, DomainState

from ._backups import SimBackups
from ._changes import ChangeLog, Entity, RecordMap
from ._driver import SimDriver, cpu_in, kvm_in
from ._guest import SimGuest, SimGuests
from ._host import SimHost
from ._host_record import HostPorts
from ._migration import MigrationEngine
from ._model import (
    ARMED_KINDS,
    DOMAIN_FAULTS,
    URI_SCHEME,
    FaultKind,
    FaultRecord,
    MigrationTransition,
    SimDomain,
    SimFaultError,
    SimHostState,
    SimState,
    SimTiming,
    host_name,
)
from ._persist import SimJournal
from ._storage import SHARED, SimStorage
from ._usage import SimLoad, SimMeters

logger = logging.getLogger(__name__)


class SimCloud:
    """Simulated hosts that share pools and a migration network.

    Timers run on the asyncio loop that calls the drivers, so every call
    (driver methods, ``inject``) must come from that loop's thread, inside the
    running loop (an ``async def`` route, not a sync one run in a thread pool).
    ``clock`` stamps ``fault_log`` entries, and the end times of boots and shutdowns and
    the times of migration ticks kept in the state file (default: wall time).
    ``time_scale`` is how many simulated seconds of migration one loop second is worth.

    ``state_path`` (a SQLite file, created if missing) makes the world durable; what a
    new ``SimCloud`` on an existing file finds is the package docstring's "Restarts".
    Every entry point (driver call, public method, timer callback) runs inside
    ``transaction``, which commits what the entry point changed before it returns.
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
        detach_seconds: float = 0.5,
        backup_mib_s: float = 1000.0,
    ) -> None:
        self.timing = SimTiming(
            boot_seconds=boot_seconds,
            shutdown_seconds=shutdown_seconds,
            link_mib_s=link_mib_s,
            time_scale=time_scale,
            migration_tick_s=migration_tick_s,
            clock=clock or time.time,
            detach_seconds=detach_seconds,
            backup_mib_s=backup_mib_s,
        )
        self.fault_log: list[FaultRecord] = []
        self.changes = ChangeLog()
        self.transaction = _Transaction(self)
        self.journal: SimJournal | None = None
        self._hosts: RecordMap[str, SimHost] = RecordMap(self.changes, Entity.HOST)
        self._dirty_rates: RecordMap[str, float] = RecordMap(self.changes, Entity.DIRTY_RATE)
        self._saved_memory: RecordMap[str, tuple[DomainSpec, str]] = RecordMap(self.changes, Entity.MEMORY)
        self._drivers: dict[str, SimDriver] = {}
        self.guests = SimGuests()
        self.meters = SimMeters(clock=self.timing.clock)
        self.storage = SimStorage(self.changes, disk_user=self.live_user_of)
        self.backups = SimBackups(self.storage, self.timing, self.guests)
        self.migrations = MigrationEngine(
            self.changes,
            hosts=self,
            storage=self.storage,
            timing=self.timing,
            dirty_rate=self.dirty_rate,
            transaction=self.transaction,
        )
        self._host_ports = HostPorts(
            changes=self.changes,
            timing=self.timing,
            transaction=self.transaction,
            deliver=self.deliver,
            migrations=self.migrations,
            guests=self.guests,
            backups=self.backups,
        )
        # boots and shutdowns loaded from the state file that still wait for a timer
        self._unresumed: list[tuple[SimHost, SimDomain]] = []
        if state_path is not None:
            self.journal = SimJournal(Path(state_path))
            self.changes.recording = True
            with self.transaction:
                self._load(self.journal)

    # ------------------------------------------------------------------ the state file

    def _load(self, journal: SimJournal) -> None:
        for host in journal.load_hosts(self._host_ports):
            self._hosts.load(host.name, host)
        self.migrations.load(journal.load_migrations(self.host_named))
        for owner, domain in journal.load_domains():
            found = self._hosts.get(owner)
            if found is None:
                continue
            host = found
            host.adopt(domain)
            if domain.state is DomainState.MIGRATING and not self.migrations.running_from(host, domain.name):
                # a file written before migrations were stored: the job is gone, the domain stays
                domain.state = domain.state_before_migration or DomainState.RUNNING
                domain.state_before_migration = None
            elif domain.state in (DomainState.STARTING, DomainState.SHUTTING_DOWN):
                self._unresumed.append((host, domain))
        self.storage.load(journal.load_pools(self.changes), journal.load_snapshots())
        for handle, saved in journal.load_saved_memory():
            self._saved_memory.load(handle, saved)
        for domain_name, rate in journal.load_dirty_rates():
            self._dirty_rates.load(domain_name, rate)
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
        now = self.timing.clock()
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

    def commit(self) -> None:
        """Write what changed to the state file (the outermost ``transaction`` does it)."""
        if self.journal is not None:
            self.journal.write(self.changes)

    def close(self) -> None:
        """Commit what is pending and close the state file; later changes stay in memory."""
        journal = self.journal
        if journal is None:
            return
        journal.write(self.changes)
        journal.close()
        self.journal = None
        self.changes.recording = False

    # ------------------------------------------------------------------ hosts and drivers

    def add_host(self, name: str, vcpus: int, memory_mib: int, bridges: Iterable[str] = ()) -> str:
        """Add a host with the Linux ``bridges`` it has; returns its URI ``sim://NAME``."""
        if not name or "/" in name:
            raise ValueError(f"invalid simulated host name {name!r}")
        if name in self._hosts:
            raise ValueError(f"simulated host {name} exists already")
        if vcpus < 1 or memory_mib < 1:
            raise ValueError("a host needs at least one vcpu and some memory")
        with self.transaction:
            host = SimHost(self._host_ports, name, vcpus, memory_mib, tuple(sorted(set(bridges))))
            return self._hosts.put(name, host).uri

    def set_bridges(self, host: str, bridges: Iterable[str]) -> None:
        """The bridges a host has from now on, as an admin adds or removes one."""
        with self.transaction:
            self._host(host).bridges = tuple(sorted(set(bridges)))

    @property
    def host_names(self) -> list[str]:
        return list(self._hosts)

    def driver(self, uri: str) -> SimDriver:
        """The connection to host ``uri`` (the same object for the same host); its query's
        ``kvm=absent|works|broken`` (default absent) says what KVM the host has, and
        ``cpu=MODEL&cpufeatures=a,b`` the CPU it offers KVM guests (TCG ones get qemu64)."""
        if not uri.startswith(URI_SCHEME):
            raise ValueError(f"{uri!r} is not a simulated host URI (sim://NAME)")
        canonical = URI_SCHEME + host_name(uri)
        driver = self._drivers.get(canonical)
        if driver is None:
            driver = self._drivers[canonical] = SimDriver(self, canonical, kvm=kvm_in(uri), cpu=cpu_in(uri))
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
        target = self._host(host)
        if count < 1:
            raise SimFaultError("count must be at least 1")
        if kind in DOMAIN_FAULTS and not domain:
            raise SimFaultError(f"fault {kind} needs a domain")
        record = FaultRecord(self.timing.clock(), target.name, kind, domain, count)
        if kind in ARMED_KINDS:
            target.arm(kind, domain, count)
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
        elif kind in (FaultKind.DISCONNECT, FaultKind.RECONNECT):
            target.link_up = kind is FaultKind.RECONNECT
            if not target.link_up:
                target.consoles.hang_up_all()  # their streams rode on the lost connection
        self.fault_log.append(record)
        return record

    def armed_faults(self, host: str) -> dict[FaultKind, dict[str | None, int]]:
        """Faults waiting for their trigger on ``host``: kind → {domain or None: times left}."""
        armed = self._host(host).armed
        return {kind: armed.of(kind) for kind in ARMED_KINDS}

    def _host(self, host: str) -> SimHost:
        found = self._hosts.get(host_name(host))
        if found is None:
            raise SimFaultError(f"no simulated host {host}")
        return found

    def set_dirty_rate(self, domain: str, mib_s: float) -> None:
        """How fast ``domain``'s guest dirties memory (it follows the domain across hosts)."""
        if mib_s < 0:
            raise ValueError("a dirty rate cannot be negative")
        with self.transaction:
            self._dirty_rates.put(domain, mib_s)

    def dirty_rate(self, domain: str) -> float:
        return self._dirty_rates.get(domain, 0.0)

    def set_load(self, domain: str, load: SimLoad) -> None:
        """How busy ``domain``'s guest keeps its CPUs, memory, disks and network (``_usage``)."""
        self.meters.loads[domain] = load

    def set_guest(self, domain: str, guest: SimGuest) -> None:
        """What runs in ``domain`` (see ``_guest``); an agent started in a running guest connects now."""
        with self.transaction:
            self.guests.guests[domain] = guest
            for host in self._hosts.values():
                found = host.domains.get(domain)
                if found is not None and self.guests.agent_connected(found):
                    host.emit(DomainEventType.AGENT_CONNECTED, found, detail="guest agent")

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
        return self._live_instance(domain).memory

    def write_memory(self, domain: str, content: str) -> None:
        with self.transaction:
            self._live_instance(domain).memory = content

    def _live_instance(self, domain: str) -> SimDomain:
        for host in self._hosts.values():
            found = host.domains.get(domain)
            if found is not None and found.active:
                return found
        raise SimFaultError(f"domain {domain} is not running anywhere")

    def save_memory(self, handle: str, spec: DomainSpec, memory: str) -> None:
        with self.transaction:
            self._saved_memory.put(handle, (spec, memory))

    def saved_memory(self, handle: str) -> tuple[DomainSpec, str] | None:
        return self._saved_memory.get(handle)

    def forget_memory(self, handle: str) -> None:
        with self.transaction:
            self._saved_memory.pop(handle)

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
        (the last ``MigrationEngine.RECORD_LIMIT``). A refused migration starts and ends at once;
        each start has exactly one end once it is over."""
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

    def __init__(self, cloud: SimCloud) -> None:
        self._cloud = cloud
        self._depth = 0

    def __enter__(self) -> None:
        self._depth += 1
        if self._depth == 1:
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
        self._depth -= 1
        if self._depth == 0:
            self._cloud.commit()
