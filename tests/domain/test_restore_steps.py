"""The restore steps of DESIGN.md §4 (``domain.restore``): their order, as a table."""

from __future__ import annotations

import pytest

from virtplane.domain.restore import STEPS, RestoreStep, next_step, not_past

R = RestoreStep


def test_the_steps_follow_the_design_in_order() -> None:
    assert [row.step.value for row in STEPS] == [
        "",
        "Validate",
        "EnterMaintenance",
        "ProcessRestore",
        "ExitMaintenance",
        "RestorePowerState",
    ]
    assert {row.step for row in STEPS} == set(RestoreStep), "every step has a row"


def test_nothing_is_touched_before_enter_maintenance() -> None:
    touching = [row.step for row in STEPS if row.touches_vm]
    assert touching[0] is R.ENTER_MAINTENANCE
    assert [row.touches_vm for row in STEPS] == sorted(row.touches_vm for row in STEPS)


@pytest.mark.parametrize(
    ("step", "after"),
    [
        (R.NEW, R.VALIDATE),
        (R.VALIDATE, R.ENTER_MAINTENANCE),
        (R.ENTER_MAINTENANCE, R.PROCESS_RESTORE),
        (R.PROCESS_RESTORE, R.EXIT_MAINTENANCE),
        (R.EXIT_MAINTENANCE, R.RESTORE_POWER_STATE),
        (R.RESTORE_POWER_STATE, None),
    ],
)
def test_next_step(step: RestoreStep, after: RestoreStep | None) -> None:
    assert next_step(step) is after


@pytest.mark.parametrize(
    ("step", "limit", "expected"),
    [
        (R.NEW, R.VALIDATE, True),
        (R.VALIDATE, R.VALIDATE, True),
        (R.ENTER_MAINTENANCE, R.VALIDATE, False),  # entered: never validated (or re-measured) again
        (R.VALIDATE, R.ENTER_MAINTENANCE, True),  # a crash after the hold was written resumes here
        (R.ENTER_MAINTENANCE, R.ENTER_MAINTENANCE, True),
        (R.PROCESS_RESTORE, R.ENTER_MAINTENANCE, False),
    ],
)
def test_not_past(step: RestoreStep, limit: RestoreStep, expected: bool) -> None:
    assert not_past(step, limit) is expected
