"""The simulated BMC of simulated hosts: the system id is the sim host's name; powering it
off is the simulator's ``host-down`` (its live domains die, as in a real power cut), its
power state is whether the sim host is up.

Faults are armed per host (``SimBmcs.inject``) and consumed one call at a time:
``timeout`` (no answer), ``wrong-credentials``, ``no-confirm`` (ForceOff is accepted but
the host stays on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from virtplane.domain.resources import Host, Secret
from virtplane.fencing.base import (
    BmcCredentialsRejected,
    BmcSystemNotFound,
    BmcUnreachable,
    PowerState,
)


class BmcFault(StrEnum):
    TIMEOUT = "timeout"
    WRONG_CREDENTIALS = "wrong-credentials"
    NO_CONFIRM = "no-confirm"


@dataclass
class SimBmcs:
    """Every simulated host's BMC, over one ``SimCloud``; ``calls`` records what was asked."""

    cloud: Any
    faults: dict[str, dict[BmcFault, int]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    credentials: list[tuple[str, str | None]] = field(default_factory=list)
    """The username and password each BMC client was made with (the password opened: sealing)."""

    def inject(self, system_id: str, fault: BmcFault | str, count: int = 1) -> None:
        armed = self.faults.setdefault(system_id, {})
        armed[BmcFault(fault)] = armed.get(BmcFault(fault), 0) + count

    def bmc(self, host: Host, secret: Secret, timeout_s: float) -> SimBmc:
        del timeout_s  # the simulated BMC takes any credentials unless told otherwise
        self.credentials.append((secret.spec.username, secret.spec.password))
        fencing = host.spec.fencing
        assert fencing is not None and fencing.redfish is not None
        return SimBmc(self, fencing.redfish.system_id)

    def _take(self, system_id: str, fault: BmcFault) -> bool:
        armed = self.faults.get(system_id, {})
        if armed.get(fault, 0) > 0:
            armed[fault] -= 1
            return True
        return False


@dataclass
class SimBmc:
    bmcs: SimBmcs
    system_id: str

    def _check(self, call: str) -> Any:
        self.bmcs.calls.append((self.system_id, call))
        if self.bmcs._take(self.system_id, BmcFault.TIMEOUT):
            raise BmcUnreachable(f"simulated BMC of {self.system_id} did not answer {call}")
        if self.bmcs._take(self.system_id, BmcFault.WRONG_CREDENTIALS):
            raise BmcCredentialsRejected(f"simulated BMC of {self.system_id} rejected the credentials (401)")
        host = self.bmcs.cloud.host_named(self.system_id)
        if host is None:
            raise BmcSystemNotFound(f"simulated BMC has no system {self.system_id}")
        return host

    async def power_state(self) -> PowerState:
        host = self._check("power_state")
        return PowerState.ON if host.up else PowerState.OFF

    async def force_off(self) -> None:
        host = self._check("force_off")
        if self.bmcs._take(self.system_id, BmcFault.NO_CONFIRM):
            return
        if host.up:
            self.bmcs.cloud.inject(self.system_id, "host-down")
