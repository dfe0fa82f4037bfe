"""Which VM a volume is attached to: the rule as a table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from virtplane.domain.attachments import VolumeUser, holder

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def user(
    vm: str, *, lists: bool = True, deleting: bool = False, may_hold: bool = False, at: int = 0
) -> VolumeUser:
    return VolumeUser(vm, lists, deleting, may_hold, T0 + timedelta(seconds=at))


@pytest.mark.parametrize(
    ("current", "users", "expected"),
    [
        (None, [], None),  # nobody uses it
        (None, [user("a")], "a"),  # the one VM that lists it
        (None, [user("b", at=1), user("a", at=2)], "b"),  # two at once: created first
        (None, [user("b", at=1), user("a", at=1)], "a"),  # ... then by name
        (None, [user("a", at=1, deleting=True), user("b", at=2)], "b"),  # not one on its way out
        (None, [user("a", deleting=True)], None),
        ("b", [user("a", at=1), user("b", at=2)], "b"),  # the holder keeps it, even if younger
        ("b", [user("b", deleting=True)], "b"),  # ... while being deleted: its domain goes first
        ("b", [user("a", at=1)], "a"),  # the holder is gone: the next one gets it
        ("b", [user("b", lists=False), user("a")], "a"),  # the holder dropped it from its disks
        ("b", [user("b", lists=False, may_hold=True), user("a")], "b"),  # ... but its domain may have it
        ("b", [user("b", lists=False)], None),  # released, nobody else
        (None, [user("b", lists=False, may_hold=True)], None),  # may_hold only keeps, never takes
    ],
)
def test_a_volume_has_at_most_one_holder(
    current: str | None, users: list[VolumeUser], expected: str | None
) -> None:
    assert holder(current, users) == expected


def test_an_unknown_creation_time_sorts_last() -> None:
    assert holder(None, [VolumeUser("a", True), user("b", at=5)]) == "b"
