"""Driver errors, typed so that callers never look at message strings.

DriverError
 ├── TransientError   retry later (connection lost, host busy, timeout)
 │    ├── HostUnreachable   the host connection is away
 │    └── ConsoleBusy       another session holds the domain's console
 ├── PermanentError   retrying the same call will not help (bad spec, unsupported)
 │    ├── Unsupported       the driver lacks the capability
 │    ├── ImageRefused      a library file is not a usable image (a link out, a device, ...)
 │    ├── DriverUnavailable the driver cannot load here (a library is missing on this machine)
 │    └── NotRunning        the domain has no live instance for what was asked (its console)
 └── NotFound         the domain, volume or snapshot does not exist
"""

from __future__ import annotations


class DriverError(Exception):
    """Base of every error a HypervisorDriver raises."""


class TransientError(DriverError):
    pass


class HostUnreachable(TransientError):
    pass


class AgentUnavailable(TransientError):
    """The domain's guest agent does not answer: the guest runs none (yet), or it is not running."""


class ConsoleBusy(TransientError):
    """Another session has the domain's console; it is free again once that one closes."""


class PermanentError(DriverError):
    pass


class NotRunning(PermanentError):
    pass


class Unsupported(PermanentError):
    pass


class ImageRefused(PermanentError):
    """Its message names only the library pool and file, never where a link leads."""


class DriverUnavailable(PermanentError):
    """The driver cannot load on the control plane's machine; its message says how to install it."""


class NotFound(DriverError):
    pass


__all__ = [
    "AgentUnavailable",
    "ConsoleBusy",
    "DriverError",
    "DriverUnavailable",
    "HostUnreachable",
    "ImageRefused",
    "NotFound",
    "NotRunning",
    "PermanentError",
    "TransientError",
    "Unsupported",
]
