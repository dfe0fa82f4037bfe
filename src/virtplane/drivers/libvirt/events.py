"""libvirt's event loop, and the mapping of libvirt states and events to ours.

libvirt delivers domain events and connection keepalives only while an event
loop runs. We use libvirt's default implementation: registered once per
process, before the first connection is opened, and driven by one daemon
thread. Callbacks run on that thread, so they only translate and hand the
event to the sink (which is thread-safe by contract).

Events can be missed (while a connection is away, or between a restart of the
control plane and its reconnect). Nothing here replays them: the control plane
resyncs periodically and after every HOST_UP by calling ``list_domains``, whose
states and exit reasons are the level truth that events only hint at.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import (
    DomainEvent,
    DomainEventType,
    DomainInfo,
    DomainState,
    EventSink,
    MigrationJob,
    vm_uid_of,
)
from virtplane.drivers.libvirt import _libvirt
from virtplane.drivers.libvirt.domain import LibvirtDomain
from virtplane.drivers.libvirt.migration import is_incoming

log = logging.getLogger(__name__)

_loop_lock = threading.Lock()
_loop_thread: threading.Thread | None = None


def ensure_event_loop() -> None:
    """Register libvirt's default event loop and start its thread, once per process."""
    global _loop_thread
    with _loop_lock:
        if _loop_thread is not None:
            return
        lv = _libvirt.load()
        lv.virEventRegisterDefaultImpl()

        def run_forever() -> None:
            while True:
                lv.virEventRunDefaultImpl()

        _loop_thread = threading.Thread(target=run_forever, name="libvirt-event-loop", daemon=True)
        _loop_thread.start()


@dataclass(frozen=True)
class MappedEvent:
    type: DomainEventType
    reason: ExitReason | None
    detail: str


@functools.cache
def _state_names() -> dict[int, DomainState]:
    lv = _libvirt.load()
    return {
        lv.VIR_DOMAIN_NOSTATE: DomainState.RUNNING,
        lv.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
        lv.VIR_DOMAIN_BLOCKED: DomainState.RUNNING,
        lv.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
        lv.VIR_DOMAIN_SHUTDOWN: DomainState.SHUTTING_DOWN,
        lv.VIR_DOMAIN_SHUTOFF: DomainState.SHUTOFF,
        lv.VIR_DOMAIN_CRASHED: DomainState.CRASHED,
        lv.VIR_DOMAIN_PMSUSPENDED: DomainState.PAUSED,
    }


@functools.cache
def _shutoff_reasons() -> dict[int, ExitReason | None]:
    lv = _libvirt.load()
    return {
        lv.VIR_DOMAIN_SHUTOFF_UNKNOWN: None,  # defined, never ran
        lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN: ExitReason.GUEST_SHUTDOWN,
        lv.VIR_DOMAIN_SHUTOFF_DESTROYED: ExitReason.STOPPED_BY_SYSTEM,
        lv.VIR_DOMAIN_SHUTOFF_CRASHED: ExitReason.CRASH,
        lv.VIR_DOMAIN_SHUTOFF_MIGRATED: ExitReason.STOPPED_BY_SYSTEM,
        lv.VIR_DOMAIN_SHUTOFF_SAVED: ExitReason.STOPPED_BY_SYSTEM,
        lv.VIR_DOMAIN_SHUTOFF_FAILED: ExitReason.START_FAILED,
        lv.VIR_DOMAIN_SHUTOFF_FROM_SNAPSHOT: ExitReason.STOPPED_BY_SYSTEM,
        # The daemon killed the guest while reconnecting to it after its own restart.
        lv.VIR_DOMAIN_SHUTOFF_DAEMON: ExitReason.HOST_FAILURE,
    }


def map_state(state: int, reason: int, *, stop_requested: bool) -> tuple[DomainState, ExitReason | None]:
    """Our state and exit reason for libvirt's ``(state, reason)`` of a domain.

    ``stop_requested``: the control plane asked for the shutdown, so a clean
    guest power-off is the system's doing, not the guest's.
    """
    lv = _libvirt.load()
    ours = _state_names().get(state, DomainState.SHUTOFF)
    if ours is DomainState.CRASHED:
        return ours, ExitReason.CRASH
    if ours is not DomainState.SHUTOFF:
        return ours, None
    exit_reason = _shutoff_reasons().get(reason, ExitReason.STOPPED_BY_SYSTEM)
    if reason == lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN and stop_requested:
        exit_reason = ExitReason.STOPPED_BY_SYSTEM
    return ours, exit_reason


def domain_info(
    dom: LibvirtDomain, *, stop_asked: Callable[[LibvirtDomain], bool], saving: bool, migrating: bool
) -> DomainInfo:
    """What the driver reports of ``dom``. ``stop_asked``: whether the control plane asked it to
    stop; ``saving``: it is off only for the instant of a memory save; ``migrating``: this
    driver runs its outgoing migration."""
    lv = _libvirt.load()
    state, reason = dom.state()
    shut_down = state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN
    ours, exit_reason = map_state(state, reason, stop_requested=shut_down and stop_asked(dom))
    if saving:
        ours, exit_reason = DomainState.PAUSED, None
    elif ours in (DomainState.RUNNING, DomainState.PAUSED) and migrating:
        ours = DomainState.MIGRATING
    elif ours is DomainState.PAUSED and is_incoming(dom, state, reason):
        ours = DomainState.INCOMING
    vcpus, memory_mib = dom.size()
    return DomainInfo(
        name=dom.name,
        vm_uid=vm_uid_of(dom.name),
        state=ours,
        exit_reason=exit_reason,
        cpu=vcpus,
        memory_mib=memory_mib,
        migrated_away=state == lv.VIR_DOMAIN_SHUTOFF and reason == lv.VIR_DOMAIN_SHUTOFF_MIGRATED,
    )


def map_lifecycle(event: int, detail: int, *, stop_requested: bool) -> MappedEvent | None:
    """Our event for a libvirt lifecycle event, or None for those we do not report."""
    lv = _libvirt.load()
    if event == lv.VIR_DOMAIN_EVENT_DEFINED:
        return MappedEvent(DomainEventType.DEFINED, None, "defined")
    if event == lv.VIR_DOMAIN_EVENT_UNDEFINED:
        return MappedEvent(DomainEventType.UNDEFINED, None, "undefined")
    if event == lv.VIR_DOMAIN_EVENT_STARTED:
        started = {
            lv.VIR_DOMAIN_EVENT_STARTED_BOOTED: "booted",
            lv.VIR_DOMAIN_EVENT_STARTED_MIGRATED: "migrated-in",
            lv.VIR_DOMAIN_EVENT_STARTED_RESTORED: "restored",  # also right after a memory snapshot
            lv.VIR_DOMAIN_EVENT_STARTED_FROM_SNAPSHOT: "from-snapshot",
            lv.VIR_DOMAIN_EVENT_STARTED_WAKEUP: "wakeup",
        }
        return MappedEvent(DomainEventType.STARTED, None, started.get(detail, "started"))
    if event in (lv.VIR_DOMAIN_EVENT_SUSPENDED, lv.VIR_DOMAIN_EVENT_PMSUSPENDED):
        if event == lv.VIR_DOMAIN_EVENT_SUSPENDED and detail in (
            lv.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED,
            lv.VIR_DOMAIN_EVENT_SUSPENDED_POSTCOPY,
        ):
            return None  # the last instant of an outgoing migration, not a pause
        return MappedEvent(DomainEventType.PAUSED, None, "paused")
    if event == lv.VIR_DOMAIN_EVENT_RESUMED:
        if detail == lv.VIR_DOMAIN_EVENT_RESUMED_MIGRATED:
            return None  # incoming migration finished; STARTED(migrated-in) was already sent
        return MappedEvent(DomainEventType.RESUMED, None, "resumed")
    if event == lv.VIR_DOMAIN_EVENT_CRASHED:
        return MappedEvent(DomainEventType.CRASHED, ExitReason.CRASH, "crashed")
    if event == lv.VIR_DOMAIN_EVENT_STOPPED:
        if detail == lv.VIR_DOMAIN_EVENT_STOPPED_MIGRATED:
            return MappedEvent(DomainEventType.MIGRATED, None, "migrated")
        if detail == lv.VIR_DOMAIN_EVENT_STOPPED_CRASHED:
            return MappedEvent(DomainEventType.CRASHED, ExitReason.CRASH, "crashed")
        if detail == lv.VIR_DOMAIN_EVENT_STOPPED_FAILED:
            # The emulator died under a running guest (libvirt records state reason "crashed").
            return MappedEvent(DomainEventType.CRASHED, ExitReason.CRASH, "emulator failed")
        if detail == lv.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN:
            if stop_requested:
                return MappedEvent(
                    DomainEventType.STOPPED, ExitReason.STOPPED_BY_SYSTEM, "shutdown requested"
                )
            return MappedEvent(DomainEventType.STOPPED, ExitReason.GUEST_SHUTDOWN, "shutdown by guest")
        if detail == lv.VIR_DOMAIN_EVENT_STOPPED_SAVED:
            # Memory snapshots save and restore a running domain at once; its stop is not news.
            # A save by anyone else still shows in list_domains (shutoff, stopped by system).
            return None
        stopped = {
            lv.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: "destroyed",
            lv.VIR_DOMAIN_EVENT_STOPPED_FROM_SNAPSHOT: "from-snapshot",
        }
        return MappedEvent(
            DomainEventType.STOPPED, ExitReason.STOPPED_BY_SYSTEM, stopped.get(detail, "stopped")
        )
    return None


def reboot_event() -> MappedEvent:
    """A guest reset: the domain keeps running (on_reboot=restart)."""
    return MappedEvent(DomainEventType.RESET, ExitReason.GUEST_RESET, "reset by guest")


class EventRelay:
    """Turns one connection's libvirt callbacks into ``DomainEvent``s for the driver's sink.

    ``stop_asked(name)`` tells whether the control plane asked the domain to stop; it is
    called on libvirt's event thread, so it must not call libvirt.
    """

    def __init__(self, uri: str, stop_asked: Callable[[str], bool]) -> None:
        self._uri = uri
        self._stop_asked = stop_asked
        self.sink: EventSink | None = None

    def register(self, conn: Any) -> None:
        """Subscribe to the domain events of a newly opened connection."""
        lv = _libvirt.load()
        conn.domainEventRegisterAny(None, lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None)
        conn.domainEventRegisterAny(None, lv.VIR_DOMAIN_EVENT_ID_REBOOT, self._on_reboot, None)
        conn.domainEventRegisterAny(None, lv.VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, self._on_agent, None)
        # a detach ends when the guest lets the device go: the VM looks again at once
        conn.domainEventRegisterAny(
            None, lv.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_device_removed, None
        )

    def host(self, event_type: DomainEventType, detail: str) -> None:
        self._send(DomainEvent(self._uri, "", "", event_type, None, detail))

    def migration_failed(self, job: MigrationJob) -> None:
        event = DomainEvent(
            self._uri,
            job.domain,
            vm_uid_of(job.domain),
            DomainEventType.MIGRATION_FAILED,
            None,
            job.error or job.phase,
        )
        self._send(event)

    # libvirt calls these on its event loop thread with a raw virDomain

    def _on_lifecycle(self, _conn: Any, dom: Any, event: int, detail: int, _opaque: object) -> None:
        try:
            name = LibvirtDomain(dom).name
            mapped = map_lifecycle(event, detail, stop_requested=self._stop_asked(name))
            if mapped is not None:
                self._domain(name, mapped)
        except Exception:
            log.exception("libvirt lifecycle callback failed")

    def _on_reboot(self, _conn: Any, dom: Any, _opaque: object) -> None:
        try:
            self._domain(LibvirtDomain(dom).name, reboot_event())
        except Exception:
            log.exception("libvirt reboot callback failed")

    def _on_agent(self, _conn: Any, dom: Any, state: int, _reason: int, _opaque: object) -> None:
        try:
            lv = _libvirt.load()
            connected = state == lv.VIR_CONNECT_DOMAIN_EVENT_AGENT_LIFECYCLE_STATE_CONNECTED
            event = DomainEventType.AGENT_CONNECTED if connected else DomainEventType.AGENT_DISCONNECTED
            self._domain(LibvirtDomain(dom).name, MappedEvent(event, None, "guest agent"))
        except Exception:
            log.exception("libvirt agent lifecycle callback failed")

    def _on_device_removed(self, _conn: Any, dom: Any, alias: str, _opaque: object) -> None:
        try:
            removed = MappedEvent(DomainEventType.DEVICE_REMOVED, None, str(alias))
            self._domain(LibvirtDomain(dom).name, removed)
        except Exception:
            log.exception("libvirt device-removed callback failed")

    def _domain(self, name: str, mapped: MappedEvent) -> None:
        self._send(DomainEvent(self._uri, name, vm_uid_of(name), mapped.type, mapped.reason, mapped.detail))

    def _send(self, event: DomainEvent) -> None:
        sink = self.sink
        if sink is None:
            return
        try:
            sink(event)
        except Exception:
            log.exception("event sink failed on %s", event.type)


__all__ = [
    "EventRelay",
    "MappedEvent",
    "domain_info",
    "ensure_event_loop",
    "map_lifecycle",
    "map_state",
    "reboot_event",
]
