"""The words an operator types or picks at the edges, each an enum named once.

The CLI (whose ``--help`` must not load the models), the settings registry, the dashboard
(``/ui/static/vocabulary.js``), the OpenAPI document and the docs derive their lists from
these enums and nothing else: this module imports nothing, so any edge can afford it.
``tests/test_vocabulary.py`` checks every edge list against the enum it comes from; every
ladder over one of them ends in ``assert_never``, so mypy names each one a new member misses.
"""

from __future__ import annotations

from enum import StrEnum
from typing import assert_never

__all__ = [
    "DOMAIN_FAULTS",
    "HOST_FAULTS",
    "FaultKind",
    "KvmBroken",
    "MaintenanceStrategy",
    "RestoreMode",
    "Role",
    "RunPolicy",
    "restore_mode_meaning",
    "strategy_meaning",
]


class RunPolicy(StrEnum):
    """Whether a VM should run (DESIGN.md §3); its rules: ``domain.power.policy_wants`` and, for a
    failed host, ``domain.recovery``."""

    ALWAYS_ON = "AlwaysOn"
    ALWAYS_OFF = "AlwaysOff"
    MANUAL = "Manual"
    ALWAYS_ON_UNLESS_STOPPED_MANUALLY = "AlwaysOnUnlessStoppedManually"


class MaintenanceStrategy(StrEnum):
    """What maintenance does with running VMs that have local disks (DESIGN.md §5.2)."""

    ERROR = "Error"
    MIGRATION = "Migration"
    FORCE_STOP = "ForceStop"
    STOP = "Stop"


def strategy_meaning(strategy: MaintenanceStrategy) -> str:
    """The strategy in words, as the CLI's help, the settings reference and the dashboard say it."""
    match strategy:
        case MaintenanceStrategy.ERROR:
            return "nothing with local disks is touched; the host reports what blocks it"
        case MaintenanceStrategy.MIGRATION:
            return "VMs with local disks migrate with their disks"
        case MaintenanceStrategy.FORCE_STOP:
            return "VMs with local disks are powered off at once, started again after"
        case MaintenanceStrategy.STOP:
            return "VMs with local disks shut down (then forced), started again after"
        case _:
            assert_never(strategy)


class KvmBroken(StrEnum):
    """The setting host.accelerator.kvm_broken: a host whose KVM does not boot guests..."""

    FALLBACK = "fallback"
    """... runs them under TCG (and says so)."""
    REFUSE = "refuse"
    """... takes no guests until its KVM works."""


class RestoreMode(StrEnum):
    DRY_RUN = "DryRun"
    STRICT = "Strict"
    BEST_EFFORT = "BestEffort"


def restore_mode_meaning(mode: RestoreMode) -> str:
    match mode:
        case RestoreMode.DRY_RUN:
            return "only report what would change"
        case RestoreMode.STRICT:
            return "fail if anything is missing"
        case RestoreMode.BEST_EFFORT:
            return "skip what is missing and say so"
        case _:
            assert_never(mode)


class Role(StrEnum):
    """What an API token may do; each role may do all that the ones before it may."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class FaultKind(StrEnum):
    """What can be injected into a simulated host (``POST /v1/hosts/{name}/faults``)."""

    GUEST_SHUTDOWN = "guest-shutdown"
    GUEST_RESET = "guest-reset"
    CRASH = "crash"
    FAIL_START = "fail-start"
    FAIL_MIGRATION = "fail-migration"
    STALL_MIGRATION = "stall-migration"
    HOST_DOWN = "host-down"
    HOST_UP = "host-up"
    DISCONNECT = "disconnect"
    RECONNECT = "reconnect"
    IGNORE_UNPLUG = "ignore-unplug"  # the VM's guest never releases the next device asked back


DOMAIN_FAULTS = frozenset({FaultKind.GUEST_SHUTDOWN, FaultKind.GUEST_RESET, FaultKind.CRASH})
"""Faults that act on one existing domain at once, so they need one: only the VM's host takes them."""

HOST_FAULTS = frozenset({FaultKind.HOST_DOWN, FaultKind.HOST_UP, FaultKind.DISCONNECT, FaultKind.RECONNECT})
"""Faults that hit the whole host: ``POST /v1/vms/{name}/faults`` refuses them."""
