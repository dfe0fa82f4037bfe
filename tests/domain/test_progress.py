"""The per-VM move progress of a maintenance and a Migrate/Evict operation (``domain.progress``),
as a table: (progress before, what happened, max attempts) -> progress after."""

from __future__ import annotations

import pytest

from virtplane.domain.progress import (
    Arrived,
    AttemptFailed,
    Began,
    Blocked,
    InFlight,
    Left,
    MoveEvent,
    MoveProgress,
    NoSlot,
    NoTarget,
    NotReady,
    NotReturned,
    ProgressState,
    ReturnBegan,
    Returned,
    StopAsked,
    StoppedHere,
    TargetRefused,
    advance,
    observed,
    retrying,
)
from virtplane.domain.resources import MaintenanceVMProgress

S = ProgressState
NEW = MoveProgress()
MIGRATING_1 = MoveProgress(S.MIGRATING, "h2", 1, ("h2",), 40.0)
MIGRATING_3 = MoveProgress(S.MIGRATING, "h4", 3, ("h2", "h3", "h4"), 40.0)
FAILED = MoveProgress(S.FAILED, "h2", 3, ("h2",), 0.0, "its own reason")

TABLE: list[tuple[str, MoveProgress, MoveEvent, int, MoveProgress]] = [
    # -- a migration starts, and waits for a slot
    ("started", NEW, Began("h2"), 3, MoveProgress(S.MIGRATING, "h2", 1, ("h2",))),
    ("no slot", NEW, NoSlot("2/2 outbound"), 3, MoveProgress(S.WAITING_FOR_SLOT, message="2/2 outbound")),
    ("not ready", NEW, NotReady("it moves once running"), 3, MoveProgress(message="it moves once running")),
    # -- the intent says it is under way (after a restart too): attempts and targets catch up
    (
        "in flight",
        NEW,
        InFlight("h3", 2, 55.0),
        3,
        MoveProgress(S.MIGRATING, "h3", 2, ("h3",), 55.0),
    ),
    (
        "in flight, known",
        MIGRATING_1,
        InFlight("h2", 1, 70.0),
        3,
        MoveProgress(S.MIGRATING, "h2", 1, ("h2",), 70.0),
    ),
    (
        "returning",
        MoveProgress(S.MIGRATED, "h2", 1, ("h2",), 100.0),
        InFlight("h1", 1, 10.0, returning=True),
        3,
        MoveProgress(S.RETURNING, "h1", 1, ("h2",), 10.0),
    ),
    # -- the ladder: retry elsewhere while attempts remain, then the VM stays where it runs
    ("arrived", MIGRATING_1, Arrived(), 3, MoveProgress(S.MIGRATED, "h2", 1, ("h2",), 100.0)),
    (
        "attempt failed, retry",
        MIGRATING_1,
        AttemptFailed("aborted", "h1"),
        3,
        MoveProgress(S.RETRYING, "h2", 1, ("h2",), 0.0, "aborted; retrying on another host"),
    ),
    (
        "attempt failed, used up",
        MIGRATING_3,
        AttemptFailed("aborted", "h1"),
        3,
        MoveProgress(
            S.FAILED,
            "h4",
            3,
            ("h2", "h3", "h4"),
            0.0,
            "aborted; 3 attempt(s) used, the VM keeps running on h1",
        ),
    ),
    (
        "refused, retry",
        NEW,
        TargetRefused("h2", "target full"),
        3,
        MoveProgress(S.RETRYING, "h2", 1, ("h2",), message="target full"),
    ),
    (
        "refused, one attempt only",
        NEW,
        TargetRefused("h2", "target full"),
        1,
        MoveProgress(S.FAILED, "h2", 1, ("h2",), message="target full"),
    ),
    (
        "no target",
        NEW,
        NoTarget("no target host: h2: full"),
        3,
        MoveProgress(S.FAILED, message="no target host: h2: full"),
    ),
    (
        "no target after attempts",
        MoveProgress(S.RETRYING, "h2", 2, ("h2", "h3")),
        NoTarget("no target host: there are no other hosts"),
        3,
        MoveProgress(
            S.FAILED,
            "h2",
            2,
            ("h2", "h3"),
            message="no target host: there are no other hosts (after 2 failed attempt(s))",
        ),
    ),
    # -- stopping strategies and VMs that are not running
    ("stop", NEW, StopAsked("graceful stop"), 3, MoveProgress(S.STOPPING, message="graceful stop")),
    (
        "stopped",
        MoveProgress(S.STOPPING),
        StoppedHere(),
        3,
        MoveProgress(S.STOPPED, message="stopped by maintenance; starts again on cancel"),
    ),
    ("left", NEW, Left(), 3, MoveProgress(S.LEFT, message="not running")),
    (
        "left keeps a migrated record",
        MoveProgress(S.MIGRATED, "h2"),
        Left(),
        3,
        MoveProgress(S.MIGRATED, "h2"),
    ),
    # -- blocked: the plan's reason, unless it failed already (its own reason stays)
    (
        "blocked",
        MoveProgress(message="old"),
        Blocked("strategy Error"),
        3,
        MoveProgress(S.BLOCKED, message="strategy Error"),
    ),
    ("failed stays failed", FAILED, Blocked("blocked"), 3, FAILED),
    # -- cancel with return_vms
    (
        "return began",
        MoveProgress(S.MIGRATED, "h2", 1, ("h2",)),
        ReturnBegan("h1"),
        3,
        MoveProgress(S.RETURNING, "h1", 1, ("h2",)),
    ),
    (
        "returned",
        MoveProgress(S.RETURNING, "h1"),
        Returned("h1"),
        3,
        MoveProgress(S.RETURNED, "h1", message="back on h1"),
    ),
    ("not returned", NEW, NotReturned("no room"), 3, MoveProgress(S.NOT_RETURNED, message="no room")),
]


@pytest.mark.parametrize(
    ("before", "event", "max_attempts", "after"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_advance(before: MoveProgress, event: MoveEvent, max_attempts: int, after: MoveProgress) -> None:
    assert advance(before, event, max_attempts=max_attempts) == after


@pytest.mark.parametrize(
    ("before", "flight", "runs_on", "expected"),
    [
        (MIGRATING_1, None, "h2", S.MIGRATED),
        (MIGRATING_1, None, "h1", S.RETRYING),
        (MIGRATING_1, InFlight("h2", 1), "h1", S.MIGRATING),  # still under way
        (NEW, None, "h1", S.PENDING),  # nothing was followed
        (MoveProgress(S.RETRYING, "h2", 1), None, "h1", S.RETRYING),
    ],
)
def test_observed(
    before: MoveProgress, flight: InFlight | None, runs_on: str, expected: ProgressState
) -> None:
    assert observed(before, flight, runs_on, "aborted", max_attempts=3).state is expected


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (MoveProgress(S.RETRYING, attempts=1), True),
        (MoveProgress(S.MIGRATING, attempts=2), True),  # the second attempt is under way
        (MoveProgress(S.MIGRATING, attempts=1), False),
        (MoveProgress(S.MIGRATED, attempts=2), False),  # it worked in the end
        (MoveProgress(S.FAILED, attempts=3), False),
    ],
)
def test_retrying(progress: MoveProgress, expected: bool) -> None:
    assert retrying(progress) is expected


def test_the_stored_forms_round_trip() -> None:
    """A maintenance stores the progress as a model, an operation as a plain dict: same fields."""
    assert (
        MoveProgress.of(MaintenanceVMProgress.model_validate(MIGRATING_3.as_dict()).model_dump())
        == MIGRATING_3
    )
    assert MoveProgress.of(MIGRATING_3.as_dict()) == MIGRATING_3
    assert MoveProgress.of({}) == NEW
