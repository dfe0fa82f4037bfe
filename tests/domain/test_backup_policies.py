"""A backup policy's pure rules as tables: the names of its backups, and what its retention
removes (never a base that something kept reads through)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import TypeAdapter

from virtplane.domain.backup_policies import KeptBackup, Outcome, expired, policy_backup_name
from virtplane.domain.backups import Retention
from virtplane.domain.base import Name

T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
GOOD, FAILED, RUNNING = Outcome.GOOD, Outcome.FAILED, Outcome.IN_PROGRESS


def night(i: int, outcome: Outcome = GOOD, base: int | None = None, *, ours: bool = True) -> KeptBackup:
    return KeptBackup(f"b{i}", T0 + timedelta(days=i), outcome, ours, None if base is None else f"b{base}")


CASES = [
    pytest.param(
        [night(0), night(1), night(2)], Retention(keep_last=1), ["b1", "b0"], id="fulls: keep-last 1"
    ),
    pytest.param(
        [night(0), night(1, base=0), night(2, base=1)],
        Retention(keep_last=1),
        [],
        id="a kept incremental keeps its chain",
    ),
    pytest.param(
        [night(0), night(1, base=0), night(2), night(3, base=2)],
        Retention(keep_last=1),
        ["b1", "b0"],
        id="an old chain goes top first",
    ),
    pytest.param(
        [night(0), night(1), night(2, RUNNING, base=1)],
        Retention(keep_last=1),
        ["b0"],
        id="a running backup keeps its base although keep-last kept only the newest good",
    ),
    pytest.param(
        [night(0), night(1, RUNNING, base=0), night(2)],
        Retention(keep_last=1),
        [],
        id="a running incremental keeps its base that keep-last does not",
    ),
    pytest.param(
        [night(0), night(1, ours=False), night(2)],
        Retention(keep_last=1),
        ["b0"],
        id="a backup taken by hand is never the policy's to prune",
    ),
    pytest.param(
        [night(0), night(1, base=0, ours=False), night(2)],
        Retention(keep_last=1),
        [],
        id="nor the policy's backup it builds on",
    ),
    pytest.param(
        [night(0, ours=False), night(1, base=0, ours=False), night(2)],
        Retention(keep_last=1),
        [],
        id="nor its chain",
    ),
    pytest.param(
        [night(0), night(1), night(2, FAILED)],
        Retention(keep_last=1),
        ["b0"],
        id="the newest failure stays visible until a good one follows",
    ),
    pytest.param(
        [night(0), night(1, FAILED), night(2)],
        Retention(keep_last=1),
        ["b1", "b0"],
        id="an older failure goes",
    ),
    pytest.param([night(0), night(1)], Retention(), [], id="no keep option: all kept"),
    pytest.param(
        [night(i) for i in range(10)],
        Retention(keep_last=2, keep_weekly=1),
        ["b7", "b5", "b4", "b3", "b2", "b1", "b0"],
        id="keep-last 2 and keep-weekly 1: b9 b8 kept, their week counted, b6 the week before's",
    ),
]


@pytest.mark.parametrize(("backups", "retention", "gone"), CASES)
def test_what_retention_removes(backups: list[KeptBackup], retention: Retention, gone: list[str]) -> None:
    assert [e.name for e in expired(backups, retention)] == gone


def test_each_removal_says_why() -> None:
    [expiry] = expired([night(0), night(1)], Retention(keep_last=1))
    assert (expiry.name, expiry.reason) == ("b0", "no keep option covers it")


NAMES = [
    ("web-1", "web-1-20261207-0200"),
    ("v" * 49, "v" * 49 + "-20261207-0200"),
    ("v" * 50, "v" * 40 + "-"),  # too long: a digest keeps two long names apart
]


@pytest.mark.parametrize(("vm", "starts"), NAMES)
def test_a_policy_backup_is_named_from_its_vm_and_window(vm: str, starts: str) -> None:
    name = policy_backup_name(vm, T0)
    assert name.startswith(starts) and name.endswith("-20261207-0200")
    assert TypeAdapter(Name).validate_python(name) == name
    assert policy_backup_name(vm, T0) == name, "the same name on every look"
    assert policy_backup_name(vm + "x", T0) != name


def test_a_window_with_seconds_names_them() -> None:
    """A schedule with a seconds field (croniter's sixth) fires twice a minute: two names."""
    assert policy_backup_name("web-1", T0 + timedelta(seconds=5)) == "web-1-20261207-020005"
    assert policy_backup_name("web-1", T0 + timedelta(seconds=10)) == "web-1-20261207-020010"
