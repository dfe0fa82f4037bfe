"""The host resource-state machine of DESIGN.md §5.1, kept as one table.

``TRANSITIONS`` is the only place that says which event moves a host from one
state to another; everything else here reads it.

Idempotent events are explicit rows that lead back to the same state: an event
that arrives in the state it would lead to is a no-op, not an error, because a
level-triggered controller re-runs after a crash and may report the same fact
twice. Those rows are:

- ``ENABLE`` on Enabled and ``DISABLE`` on Disabled;
- ``ASK_MAINTENANCE`` on PrepareForMaintenance, ErrorInPrepareForMaintenance and
  Maintenance (maintenance is already underway or done; only ErrorInMaintenance
  treats a new request as a retry);
- ``DRAINED`` on Maintenance, ``MIGRATION_FAILED_RETRYABLE`` on
  ErrorInPrepareForMaintenance, ``BLOCKED`` on ErrorInMaintenance and
  ``ERRORS_CORRECTED`` on PrepareForMaintenance.

Deliberately invalid (``next_state`` raises ``InvalidTransition``):

- ``CANCEL`` outside maintenance: there is nothing to cancel, and cancelling on a
  Disabled host would silently enable it;
- ``ENABLE`` / ``DISABLE`` during maintenance: leave maintenance with ``CANCEL``;
- ``ASK_MAINTENANCE`` on Disabled: §5.1 allows maintenance only from Enabled,
  and cancel returns a host to Enabled, which would undo the admin's disable;
- drain outcomes (``DRAINED``, ``MIGRATION_FAILED_RETRYABLE``, ``BLOCKED``,
  ``ERRORS_CORRECTED``) anywhere the table does not list them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from virtplane.domain.resources import HostResourceState

__all__ = [
    "COUNTED_HOST_STATES",
    "MAINTENANCE_STATES",
    "TRANSITIONS",
    "HostEvent",
    "InvalidTransition",
    "accepts_vms",
    "allowed_events",
    "in_maintenance",
    "next_state",
]


class HostEvent(StrEnum):
    """What happened to a host: an admin request or an outcome of the drain."""

    ASK_MAINTENANCE = "AskMaintenance"
    """The admin asks for maintenance (or retries it after ErrorInMaintenance)."""
    DISABLE = "Disable"
    """The admin disables the host: no new VMs, running ones stay."""
    ENABLE = "Enable"
    """The admin enables a disabled host."""
    DRAINED = "Drained"
    """The host has no running VMs left."""
    MIGRATION_FAILED_RETRYABLE = "MigrationFailedRetryable"
    """A migration off the host failed and retries remain."""
    BLOCKED = "Blocked"
    """VMs remain that can't be moved (strategy Error, retries used up, no target)."""
    ERRORS_CORRECTED = "ErrorsCorrected"
    """The failed migrations were retried successfully; draining goes on."""
    CANCEL = "Cancel"
    """The admin cancels maintenance."""


_S = HostResourceState
_E = HostEvent

MAINTENANCE_STATES: frozenset[HostResourceState] = frozenset(
    {
        _S.PREPARE_FOR_MAINTENANCE,
        _S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
        _S.MAINTENANCE,
        _S.ERROR_IN_MAINTENANCE,
    }
)

TRANSITIONS: Mapping[tuple[HostResourceState, HostEvent], HostResourceState] = MappingProxyType(
    {
        # Admin control outside maintenance.
        (_S.ENABLED, _E.ASK_MAINTENANCE): _S.PREPARE_FOR_MAINTENANCE,
        (_S.ENABLED, _E.DISABLE): _S.DISABLED,
        (_S.ENABLED, _E.ENABLE): _S.ENABLED,
        (_S.DISABLED, _E.ENABLE): _S.ENABLED,
        (_S.DISABLED, _E.DISABLE): _S.DISABLED,
        # Draining.
        (_S.PREPARE_FOR_MAINTENANCE, _E.ASK_MAINTENANCE): _S.PREPARE_FOR_MAINTENANCE,
        (_S.PREPARE_FOR_MAINTENANCE, _E.DRAINED): _S.MAINTENANCE,
        (_S.PREPARE_FOR_MAINTENANCE, _E.MIGRATION_FAILED_RETRYABLE): _S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
        (_S.PREPARE_FOR_MAINTENANCE, _E.BLOCKED): _S.ERROR_IN_MAINTENANCE,
        (_S.PREPARE_FOR_MAINTENANCE, _E.ERRORS_CORRECTED): _S.PREPARE_FOR_MAINTENANCE,
        (_S.PREPARE_FOR_MAINTENANCE, _E.CANCEL): _S.ENABLED,
        # Draining with failed migrations that will be retried.
        (_S.ERROR_IN_PREPARE_FOR_MAINTENANCE, _E.ASK_MAINTENANCE): _S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
        (
            _S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
            _E.MIGRATION_FAILED_RETRYABLE,
        ): _S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
        (_S.ERROR_IN_PREPARE_FOR_MAINTENANCE, _E.BLOCKED): _S.ERROR_IN_MAINTENANCE,
        (_S.ERROR_IN_PREPARE_FOR_MAINTENANCE, _E.ERRORS_CORRECTED): _S.PREPARE_FOR_MAINTENANCE,
        (_S.ERROR_IN_PREPARE_FOR_MAINTENANCE, _E.CANCEL): _S.ENABLED,
        # Drained.
        (_S.MAINTENANCE, _E.ASK_MAINTENANCE): _S.MAINTENANCE,
        (_S.MAINTENANCE, _E.DRAINED): _S.MAINTENANCE,
        (_S.MAINTENANCE, _E.CANCEL): _S.ENABLED,
        # Stuck: VMs remain that can't be moved; asking again retries.
        (_S.ERROR_IN_MAINTENANCE, _E.ASK_MAINTENANCE): _S.PREPARE_FOR_MAINTENANCE,
        (_S.ERROR_IN_MAINTENANCE, _E.BLOCKED): _S.ERROR_IN_MAINTENANCE,
        (_S.ERROR_IN_MAINTENANCE, _E.CANCEL): _S.ENABLED,
    }
)


class InvalidTransition(ValueError):
    """An event that the host's current state does not accept."""

    def __init__(self, state: HostResourceState, event: HostEvent) -> None:
        self.state = state
        self.event = event
        self.allowed = allowed_events(state)
        allowed = ", ".join(e.value for e in self.allowed) or "none"
        super().__init__(
            f"host state {state.value} does not accept event {event.value}; allowed events: {allowed}"
        )


def next_state(state: HostResourceState, event: HostEvent) -> HostResourceState:
    """The state after ``event``; raises ``InvalidTransition`` if ``state`` doesn't accept it."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(state, event) from None


def allowed_events(state: HostResourceState) -> list[HostEvent]:
    """The events ``state`` accepts, in ``HostEvent`` declaration order."""
    return [event for event in HostEvent if (state, event) in TRANSITIONS]


def accepts_vms(state: HostResourceState) -> bool:
    """Whether a host may receive a VM (start, migration or restore): only when Enabled."""
    return state == HostResourceState.ENABLED


def in_maintenance(state: HostResourceState) -> bool:
    """Whether the host is in any of the four maintenance states."""
    return state in MAINTENANCE_STATES


COUNTED_HOST_STATES = (
    HostResourceState.ENABLED,
    HostResourceState.DISABLED,
    HostResourceState.PREPARE_FOR_MAINTENANCE,
    HostResourceState.MAINTENANCE,
)
"""The host states the dashboard counts even at zero, in this order (the others when present)."""
