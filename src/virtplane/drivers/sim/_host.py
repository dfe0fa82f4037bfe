"""One simulated host: its domains, their state machine and timers, capacity and host faults.

``SimHost`` is built in layers: ``_host_record`` (persisted fields, room, events, timers),
``_lifecycle`` (the domain operations) and, here, the faults injected into its guests
and into the host itself. A host reaches the rest of the world only through its
``HostPorts``.
"""

from __future__ import annotations

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DomainEventType, DomainState

from ._devices import DeviceHotplug
from ._lifecycle import DomainLifecycle
from ._model import SimDomain, SimFaultError

__all__ = ["SimHost"]


class SimHost(DomainLifecycle, DeviceHotplug):
    """A simulated host: constructed by ``SimCloud``, driven by its drivers and its faults."""

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
