"""libvirt states and lifecycle events mapped to ours, as tables."""

from __future__ import annotations

import pytest

from tests.conftest import libvirt_or_skip
from virtplane.domain.resources import ExitReason
from virtplane.drivers.base import DomainEventType, DomainState

lv = libvirt_or_skip()

from virtplane.drivers.libvirt.events import map_lifecycle, map_state, reboot_event  # noqa: E402

E = DomainEventType
R = ExitReason


@pytest.mark.parametrize(
    ("state", "reason", "stop_requested", "expected"),
    [
        (lv.VIR_DOMAIN_RUNNING, lv.VIR_DOMAIN_RUNNING_BOOTED, False, (DomainState.RUNNING, None)),
        (lv.VIR_DOMAIN_BLOCKED, 0, False, (DomainState.RUNNING, None)),
        (lv.VIR_DOMAIN_PAUSED, lv.VIR_DOMAIN_PAUSED_USER, False, (DomainState.PAUSED, None)),
        (lv.VIR_DOMAIN_SHUTDOWN, 0, False, (DomainState.SHUTTING_DOWN, None)),
        (lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_SHUTOFF_UNKNOWN, False, (DomainState.SHUTOFF, None)),
        (
            lv.VIR_DOMAIN_SHUTOFF,
            lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN,
            False,
            (DomainState.SHUTOFF, R.GUEST_SHUTDOWN),
        ),
        (
            lv.VIR_DOMAIN_SHUTOFF,
            lv.VIR_DOMAIN_SHUTOFF_SHUTDOWN,
            True,
            (DomainState.SHUTOFF, R.STOPPED_BY_SYSTEM),
        ),
        (
            lv.VIR_DOMAIN_SHUTOFF,
            lv.VIR_DOMAIN_SHUTOFF_DESTROYED,
            False,
            (DomainState.SHUTOFF, R.STOPPED_BY_SYSTEM),
        ),
        (lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_SHUTOFF_CRASHED, False, (DomainState.SHUTOFF, R.CRASH)),
        (lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_SHUTOFF_CRASHED, True, (DomainState.SHUTOFF, R.CRASH)),
        (lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_SHUTOFF_FAILED, False, (DomainState.SHUTOFF, R.START_FAILED)),
        (
            lv.VIR_DOMAIN_SHUTOFF,
            lv.VIR_DOMAIN_SHUTOFF_MIGRATED,
            False,
            (DomainState.SHUTOFF, R.STOPPED_BY_SYSTEM),
        ),
        (
            lv.VIR_DOMAIN_SHUTOFF,
            lv.VIR_DOMAIN_SHUTOFF_SAVED,
            False,
            (DomainState.SHUTOFF, R.STOPPED_BY_SYSTEM),
        ),
        (lv.VIR_DOMAIN_SHUTOFF, lv.VIR_DOMAIN_SHUTOFF_DAEMON, False, (DomainState.SHUTOFF, R.HOST_FAILURE)),
        (lv.VIR_DOMAIN_CRASHED, lv.VIR_DOMAIN_CRASHED_PANICKED, False, (DomainState.CRASHED, R.CRASH)),
    ],
)
def test_state_mapping(
    state: int, reason: int, stop_requested: bool, expected: tuple[DomainState, ExitReason | None]
) -> None:
    assert map_state(state, reason, stop_requested=stop_requested) == expected


@pytest.mark.parametrize(
    ("event", "detail", "stop_requested", "expected"),
    [
        (lv.VIR_DOMAIN_EVENT_DEFINED, 0, False, (E.DEFINED, None)),
        (lv.VIR_DOMAIN_EVENT_UNDEFINED, 0, False, (E.UNDEFINED, None)),
        (lv.VIR_DOMAIN_EVENT_STARTED, lv.VIR_DOMAIN_EVENT_STARTED_BOOTED, False, (E.STARTED, None)),
        (lv.VIR_DOMAIN_EVENT_STARTED, lv.VIR_DOMAIN_EVENT_STARTED_MIGRATED, False, (E.STARTED, None)),
        (lv.VIR_DOMAIN_EVENT_SUSPENDED, lv.VIR_DOMAIN_EVENT_SUSPENDED_PAUSED, False, (E.PAUSED, None)),
        (lv.VIR_DOMAIN_EVENT_SUSPENDED, lv.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED, False, None),
        (lv.VIR_DOMAIN_EVENT_RESUMED, lv.VIR_DOMAIN_EVENT_RESUMED_UNPAUSED, False, (E.RESUMED, None)),
        (lv.VIR_DOMAIN_EVENT_RESUMED, lv.VIR_DOMAIN_EVENT_RESUMED_MIGRATED, False, None),
        (
            lv.VIR_DOMAIN_EVENT_STOPPED,
            lv.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN,
            False,
            (E.STOPPED, R.GUEST_SHUTDOWN),
        ),
        (
            lv.VIR_DOMAIN_EVENT_STOPPED,
            lv.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN,
            True,
            (E.STOPPED, R.STOPPED_BY_SYSTEM),
        ),
        (
            lv.VIR_DOMAIN_EVENT_STOPPED,
            lv.VIR_DOMAIN_EVENT_STOPPED_DESTROYED,
            False,
            (E.STOPPED, R.STOPPED_BY_SYSTEM),
        ),
        (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_STOPPED_CRASHED, False, (E.CRASHED, R.CRASH)),
        (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_STOPPED_FAILED, False, (E.CRASHED, R.CRASH)),
        (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_STOPPED_MIGRATED, False, (E.MIGRATED, None)),
        (lv.VIR_DOMAIN_EVENT_STOPPED, lv.VIR_DOMAIN_EVENT_STOPPED_SAVED, False, None),
        (lv.VIR_DOMAIN_EVENT_CRASHED, lv.VIR_DOMAIN_EVENT_CRASHED_PANICKED, False, (E.CRASHED, R.CRASH)),
        (lv.VIR_DOMAIN_EVENT_SHUTDOWN, lv.VIR_DOMAIN_EVENT_SHUTDOWN_GUEST, False, None),
    ],
)
def test_lifecycle_mapping(
    event: int, detail: int, stop_requested: bool, expected: tuple[DomainEventType, ExitReason | None] | None
) -> None:
    mapped = map_lifecycle(event, detail, stop_requested=stop_requested)
    assert (None if mapped is None else (mapped.type, mapped.reason)) == expected


def test_reboot_is_a_guest_reset() -> None:
    assert (reboot_event().type, reboot_event().reason) == (E.RESET, R.GUEST_RESET)
