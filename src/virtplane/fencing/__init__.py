"""Fencing: powering a failed host off through its BMC, so that its VMs may run elsewhere.

``Bmc`` is the interface (power state, force off); ``redfish`` implements it over
Redfish with the ``sushy`` client, ``sim`` for simulated hosts. ``BmcError`` and its
subclasses carry the ``reason`` shown on the host and its VMs.
"""

from virtplane.fencing.base import (
    Bmc,
    BmcCredentialsRejected,
    BmcError,
    BmcFactory,
    BmcSystemNotFound,
    BmcUnreachable,
    PowerState,
)

__all__ = [
    "Bmc",
    "BmcCredentialsRejected",
    "BmcError",
    "BmcFactory",
    "BmcSystemNotFound",
    "BmcUnreachable",
    "PowerState",
]
