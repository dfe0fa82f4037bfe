"""The recovery decision after a host failure, against DESIGN.md §3 row "host down", and the
per-cluster rate limit with its priority order."""

from __future__ import annotations

import pytest

from virtplane.domain.recovery import (
    RECOVERY,
    Candidate,
    Recovery,
    StorageKind,
    admitted,
    queue_position,
    recovery,
)
from virtplane.domain.resources import HostConnection, RunPolicy

ON, OFF, MANUAL, AOUSM = (
    RunPolicy.ALWAYS_ON,
    RunPolicy.ALWAYS_OFF,
    RunPolicy.MANUAL,
    RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
)
SHARED, LOCAL = StorageKind.SHARED, StorageKind.LOCAL
RESTART, STOPPED, WAIT = Recovery.RESTART_ELSEWHERE, Recovery.STAY_STOPPED, Recovery.WAIT


def test_the_table_is_complete() -> None:
    assert len(RECOVERY) == len(RunPolicy) * len(StorageKind) * len(HostConnection)


# DESIGN.md §3 "host down (after fencing, shared storage only)":
# AlwaysOn start elsewhere; AlwaysOff —; Manual stay Stopped; AlwaysOnUnlessStoppedManually start elsewhere.
@pytest.mark.parametrize(
    ("policy", "storage", "expected"),
    [
        (ON, SHARED, RESTART),
        (AOUSM, SHARED, RESTART),
        (MANUAL, SHARED, STOPPED),
        (OFF, SHARED, STOPPED),
        (ON, LOCAL, WAIT),  # "shared storage only": a local disk ties the VM to its host
        (AOUSM, LOCAL, WAIT),
        (MANUAL, LOCAL, WAIT),
        (OFF, LOCAL, WAIT),
    ],
)
def test_host_down(policy: RunPolicy, storage: StorageKind, expected: Recovery) -> None:
    assert recovery(policy, storage, HostConnection.DOWN) is expected


@pytest.mark.parametrize("liveness", [HostConnection.UP, HostConnection.DISCONNECTED, HostConnection.UNKNOWN])
@pytest.mark.parametrize("policy", list(RunPolicy))
@pytest.mark.parametrize("storage", list(StorageKind))
def test_nothing_moves_before_the_host_is_down(
    liveness: HostConnection, policy: RunPolicy, storage: StorageKind
) -> None:
    """Only a confirmed power-off releases a VM: a silent host may still run it."""
    assert recovery(policy, storage, liveness) is WAIT


WAITING = [Candidate("a", 0), Candidate("b", 5), Candidate("c", 5), Candidate("d", 1)]


@pytest.mark.parametrize(
    ("starting", "limit", "expected"),
    [
        (0, 10, {"a", "b", "c", "d"}),
        (0, 2, {"b", "c"}),  # priority first, then name
        (0, 3, {"b", "c", "d"}),
        (1, 2, {"b"}),
        (2, 2, set()),  # no free slot
        (5, 2, set()),  # more starting than the limit (the limit was lowered): none
    ],
)
def test_admitted(starting: int, limit: int, expected: set[str]) -> None:
    assert admitted(WAITING, starting, limit) == expected


def test_queue_position() -> None:
    assert [queue_position(WAITING, n) for n in ("b", "c", "d", "a")] == [0, 1, 2, 3]
