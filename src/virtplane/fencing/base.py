"""The BMC interface the fencing controller uses, and the errors it may raise."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from virtplane.domain.resources import Host, Secret


class PowerState(StrEnum):
    ON = "On"
    OFF = "Off"
    POWERING_ON = "PoweringOn"
    POWERING_OFF = "PoweringOff"
    UNKNOWN = "Unknown"


class BmcError(Exception):
    """The BMC did not do what was asked; ``reason`` goes on the host's and its VMs' status."""

    reason = "BmcError"


class BmcUnreachable(BmcError):
    """No answer in time (address, network, the BMC itself)."""

    reason = "BmcUnreachable"


class BmcCredentialsRejected(BmcError):
    reason = "BmcCredentialsRejected"


class BmcSystemNotFound(BmcError):
    """The BMC answers but has no ComputerSystem with the configured id."""

    reason = "BmcSystemNotFound"


class Bmc(Protocol):
    """One host's BMC. Both calls may raise ``BmcError``; ``force_off`` on a host that is
    already off is not an error."""

    async def power_state(self) -> PowerState: ...

    async def force_off(self) -> None: ...


BmcFactory = Callable[[Host, Secret, float], Bmc]
"""(host with spec.fencing, its credentials, timeout per call in seconds) -> its BMC."""
