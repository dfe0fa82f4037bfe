"""The host transition table (DESIGN.md §5.1), checked pair by pair."""

from __future__ import annotations

import itertools

import pytest

from virtplane.domain.host_states import (
    TRANSITIONS,
    HostEvent,
    InvalidTransition,
    accepts_vms,
    allowed_events,
    in_maintenance,
    next_state,
)
from virtplane.domain.resources import HostResourceState as S

E = HostEvent

# Written out by hand from DESIGN.md §5.1 plus the documented idempotent rows;
# every pair not listed here must be refused.
EXPECTED: dict[tuple[S, HostEvent], S] = {
    (S.ENABLED, E.ASK_MAINTENANCE): S.PREPARE_FOR_MAINTENANCE,
    (S.ENABLED, E.DISABLE): S.DISABLED,
    (S.ENABLED, E.ENABLE): S.ENABLED,
    (S.DISABLED, E.ENABLE): S.ENABLED,
    (S.DISABLED, E.DISABLE): S.DISABLED,
    (S.PREPARE_FOR_MAINTENANCE, E.ASK_MAINTENANCE): S.PREPARE_FOR_MAINTENANCE,
    (S.PREPARE_FOR_MAINTENANCE, E.DRAINED): S.MAINTENANCE,
    (S.PREPARE_FOR_MAINTENANCE, E.MIGRATION_FAILED_RETRYABLE): S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
    (S.PREPARE_FOR_MAINTENANCE, E.BLOCKED): S.ERROR_IN_MAINTENANCE,
    (S.PREPARE_FOR_MAINTENANCE, E.ERRORS_CORRECTED): S.PREPARE_FOR_MAINTENANCE,
    (S.PREPARE_FOR_MAINTENANCE, E.CANCEL): S.ENABLED,
    (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, E.ASK_MAINTENANCE): S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
    (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, E.MIGRATION_FAILED_RETRYABLE): S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
    (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, E.BLOCKED): S.ERROR_IN_MAINTENANCE,
    (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, E.ERRORS_CORRECTED): S.PREPARE_FOR_MAINTENANCE,
    (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, E.CANCEL): S.ENABLED,
    (S.MAINTENANCE, E.ASK_MAINTENANCE): S.MAINTENANCE,
    (S.MAINTENANCE, E.DRAINED): S.MAINTENANCE,
    (S.MAINTENANCE, E.CANCEL): S.ENABLED,
    (S.ERROR_IN_MAINTENANCE, E.ASK_MAINTENANCE): S.PREPARE_FOR_MAINTENANCE,
    (S.ERROR_IN_MAINTENANCE, E.BLOCKED): S.ERROR_IN_MAINTENANCE,
    (S.ERROR_IN_MAINTENANCE, E.CANCEL): S.ENABLED,
}

ALL_PAIRS = list(itertools.product(S, HostEvent))


@pytest.mark.parametrize(("state", "event"), ALL_PAIRS, ids=[f"{s.value}-{e.value}" for s, e in ALL_PAIRS])
def test_every_state_event_pair(state: S, event: HostEvent) -> None:
    expected = EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(InvalidTransition):
            next_state(state, event)
    else:
        assert next_state(state, event) is expected


def test_table_has_no_rows_beyond_the_expected_ones() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[(S.DISABLED, E.ASK_MAINTENANCE)] = S.PREPARE_FOR_MAINTENANCE  # type: ignore[index]


def test_invalid_transition_names_state_event_and_allowed_events() -> None:
    with pytest.raises(InvalidTransition) as caught:
        next_state(S.DISABLED, E.ASK_MAINTENANCE)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.state is S.DISABLED
    assert error.event is E.ASK_MAINTENANCE
    assert error.allowed == [E.DISABLE, E.ENABLE]
    assert str(error) == (
        "host state Disabled does not accept event AskMaintenance; allowed events: Disable, Enable"
    )


def test_cancel_outside_maintenance_is_refused() -> None:
    for state in (S.ENABLED, S.DISABLED):
        with pytest.raises(InvalidTransition, match="does not accept event Cancel"):
            next_state(state, E.CANCEL)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.ENABLED, [E.ASK_MAINTENANCE, E.DISABLE, E.ENABLE]),
        (S.DISABLED, [E.DISABLE, E.ENABLE]),
        (
            S.PREPARE_FOR_MAINTENANCE,
            [
                E.ASK_MAINTENANCE,
                E.DRAINED,
                E.MIGRATION_FAILED_RETRYABLE,
                E.BLOCKED,
                E.ERRORS_CORRECTED,
                E.CANCEL,
            ],
        ),
        (
            S.ERROR_IN_PREPARE_FOR_MAINTENANCE,
            [E.ASK_MAINTENANCE, E.MIGRATION_FAILED_RETRYABLE, E.BLOCKED, E.ERRORS_CORRECTED, E.CANCEL],
        ),
        (S.MAINTENANCE, [E.ASK_MAINTENANCE, E.DRAINED, E.CANCEL]),
        (S.ERROR_IN_MAINTENANCE, [E.ASK_MAINTENANCE, E.BLOCKED, E.CANCEL]),
    ],
)
def test_allowed_events(state: S, expected: list[HostEvent]) -> None:
    assert allowed_events(state) == expected


@pytest.mark.parametrize(
    ("state", "accepts", "maintenance"),
    [
        (S.ENABLED, True, False),
        (S.DISABLED, False, False),
        (S.PREPARE_FOR_MAINTENANCE, False, True),
        (S.ERROR_IN_PREPARE_FOR_MAINTENANCE, False, True),
        (S.MAINTENANCE, False, True),
        (S.ERROR_IN_MAINTENANCE, False, True),
    ],
)
def test_state_predicates(state: S, accepts: bool, maintenance: bool) -> None:
    assert accepts_vms(state) is accepts
    assert in_maintenance(state) is maintenance


def test_predicates_accept_the_plain_string_value() -> None:
    # States arrive from JSON as plain strings before being parsed; a StrEnum compares equal.
    assert accepts_vms("Enabled")  # type: ignore[arg-type]
    assert in_maintenance("Maintenance")  # type: ignore[arg-type]


def test_a_full_drain_with_a_retry_and_a_cancel() -> None:
    state = S.ENABLED
    for event, expected in [
        (E.ASK_MAINTENANCE, S.PREPARE_FOR_MAINTENANCE),
        (E.MIGRATION_FAILED_RETRYABLE, S.ERROR_IN_PREPARE_FOR_MAINTENANCE),
        (E.BLOCKED, S.ERROR_IN_MAINTENANCE),
        (E.ASK_MAINTENANCE, S.PREPARE_FOR_MAINTENANCE),
        (E.DRAINED, S.MAINTENANCE),
        (E.CANCEL, S.ENABLED),
    ]:
        state = next_state(state, event)
        assert state is expected
