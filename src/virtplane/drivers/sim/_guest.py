"""What runs inside a simulated domain, as far as the hypervisor can tell: whether the guest
runs an agent, whether it heeds the ACPI power button, what its agent reports.

A guest is set per domain (``SimCloud.set_guest``) and follows the domain across hosts, as
its disk would. Not in the state file: a restarted simulator's guests are the default one
(no agent, heeds ACPI), as a fresh image is.

As with libvirt and qemu-ga: the agent answers only while the domain runs (not while it
boots, is paused or is off) and only when the guest runs one; it is connected from the end
of the boot (AGENT_CONNECTED event) until the domain stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from virtplane.drivers.base import DomainState, GuestInterface
from virtplane.drivers.errors import AgentUnavailable

from ._model import SimDomain

LOOPBACK = GuestInterface(name="lo", mac="00:00:00:00:00:00", addresses=("127.0.0.1/8", "::1/128"))


@dataclass(frozen=True)
class SimGuest:
    agent: bool = False
    ignores_acpi: bool = False
    interfaces: tuple[GuestInterface, ...] = ()  # besides lo, which every agent reports
    filesystems: int = 1  # what a freeze freezes
    disk_write_mib_s: float = 0.0  # how fast it writes its disks (what an incremental backup copies)


NO_AGENT = SimGuest()


@dataclass
class SimGuests:
    """The guests of a world, by domain name, and which of them have their filesystems frozen."""

    guests: dict[str, SimGuest] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)

    def of(self, name: str) -> SimGuest:
        return self.guests.get(name, NO_AGENT)

    def agent_connected(self, domain: SimDomain) -> bool:
        return self.of(domain.name).agent and domain.state in (DomainState.RUNNING, DomainState.MIGRATING)

    def answering(self, domain: SimDomain) -> SimGuest:
        """The guest whose agent answers now; AgentUnavailable as libvirt says it otherwise."""
        guest = self.of(domain.name)
        if domain.state is not DomainState.RUNNING:
            raise AgentUnavailable(f"domain {domain.name} is {domain.state}: no guest agent answers")
        if not guest.agent:
            raise AgentUnavailable(f"domain {domain.name}: QEMU guest agent is not connected")
        return guest

    def interfaces(self, domain: SimDomain) -> tuple[GuestInterface, ...]:
        return (LOOPBACK, *self.answering(domain).interfaces)

    def freeze(self, domain: SimDomain) -> int:
        guest = self.answering(domain)
        if domain.name in self.frozen:
            raise AgentUnavailable(f"domain {domain.name}: the guest's filesystems are frozen already")
        self.frozen.add(domain.name)
        return guest.filesystems

    def thaw(self, domain: SimDomain) -> int:
        guest = self.answering(domain)
        if domain.name not in self.frozen:
            return 0
        self.frozen.discard(domain.name)
        return guest.filesystems

    def stopped(self, name: str) -> None:
        """The domain stopped: nothing of the guest stays frozen."""
        self.frozen.discard(name)


__all__ = ["LOOPBACK", "NO_AGENT", "SimGuest", "SimGuests"]
