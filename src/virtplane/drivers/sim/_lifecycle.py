"""The domain operations of a simulated host: define, start, stop, pause, restore, and the
transitions (boot, shutdown) that run on timers."""

from __future__ import annotations

from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DomainEventType, DomainSpec, DomainState
from virtplane.drivers.errors import PermanentError, TransientError

from ._host_record import HostRecord
from ._model import FaultKind, SimDomain

FAILED_BOOT_FRACTION = 0.5
"""A start that is made to fail dies after this share of the boot time."""


class DomainLifecycle(HostRecord):
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
        domain.boot_fails = fail
        if delay <= 0 and not fail:
            # No boot time: running when the call returns, as a libvirt domain is (its guest
            # boots inside a running domain), with no timer and no second write of the state file.
            domain.cancel_timer()  # as ``_after`` does: a reset during a boot restarts it
            self.finish_boot(domain)
            return
        self._after(delay, self.fail_boot if fail else self.finish_boot, domain)

    def finish_boot(self, domain: SimDomain) -> None:
        if domain.state is DomainState.STARTING:
            domain.state = DomainState.RUNNING
            self.emit(DomainEventType.STARTED, domain, detail="booted")
            if self._ports.guests.agent_connected(domain):  # its agent starts with the guest
                self.emit(DomainEventType.AGENT_CONNECTED, domain, detail="guest agent")

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
        if self._ports.guests.of(name).ignores_acpi:
            return  # the button is pressed and nothing happens: the grace period runs out
        self._begin_shutdown(domain)

    def agent_shutdown(self, name: str) -> None:
        """The guest's agent runs its own shutdown: it powers off as from the button, ACPI or not."""
        domain = self.get(name)
        self._ports.guests.answering(domain)
        self._begin_shutdown(domain)

    def _begin_shutdown(self, domain: SimDomain) -> None:
        self._ports.migrations.fail_domain(self, domain.name, "the guest was shut down during migration")
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
