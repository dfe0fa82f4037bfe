"""Backups' pure rules as tables: retention (vzdump/PBS keep-* plus our chains), full or
incremental, the schedule's window, and the concurrency limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from virtplane.domain.backups import (
    BackupMode,
    BackupPoint,
    ChainState,
    PendingBackup,
    Retention,
    ScheduleState,
    admit,
    next_mode,
    prune,
    schedule_due,
    valid_schedule,
)

T0 = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)  # a Monday


def nightly(days: int, *, fulls_every: int = 1) -> list[BackupPoint]:
    """One backup a night for ``days`` nights up to T0, oldest first; a full one every
    ``fulls_every`` nights and incrementals on the night before in between."""
    points: list[BackupPoint] = []
    for i in range(days):
        name = f"b{i:02d}"
        base = None if i % fulls_every == 0 else points[-1].name
        points.append(BackupPoint(name, T0 - timedelta(days=days - 1 - i), good=True, base=base))
    return points


def twice_a_day(days: int) -> list[BackupPoint]:
    """Full backups at 02:00 and 14:00 for ``days`` days up to T0's day, oldest first."""
    times = sorted(T0 - timedelta(days=d) + timedelta(hours=h) for d in range(days) for h in (0, 12))
    return [BackupPoint(f"t{i:02d}", t, good=True) for i, t in enumerate(times)]


def kept(points: list[BackupPoint], retention: Retention) -> list[str]:
    return sorted(v.name for v in prune(points, retention) if v.keep)


RETENTION_TABLE = [
    # (what, points, retention, kept)
    ("no option: all kept", nightly(3), Retention(), ["b00", "b01", "b02"]),
    ("keep-last 2", nightly(5), Retention(keep_last=2), ["b03", "b04"]),
    ("keep-daily 3", nightly(5), Retention(keep_daily=3), ["b02", "b03", "b04"]),
    # ISO weeks: T0 is Monday 7 Dec, so b13 (Mon) alone is this week, b06-b12 the week before
    ("keep-weekly 2", nightly(14), Retention(keep_weekly=2), ["b12", "b13"]),
    # last covers today's period, so daily counts the three days before it
    (
        "keep-last 1 + keep-daily 3",
        nightly(6),
        Retention(keep_last=1, keep_daily=3),
        ["b02", "b03", "b04", "b05"],
    ),
    # the newest of today is kept by last: today is covered, so daily keeps yesterday's newest
    (
        "a covered period is not counted again",
        twice_a_day(3),
        Retention(keep_last=1, keep_daily=1),
        ["t03", "t05"],
    ),
    ("keep-monthly 2 over 40 nights", nightly(40), Retention(keep_monthly=2), ["b32", "b39"]),
    (
        "a kept incremental keeps its chain",
        nightly(6, fulls_every=3),
        Retention(keep_last=1),
        ["b03", "b04", "b05"],
    ),
    ("a kept full keeps nothing else", nightly(4, fulls_every=3), Retention(keep_last=1), ["b03"]),
]


@pytest.mark.parametrize(
    ("what", "points", "retention", "expected"), RETENTION_TABLE, ids=[r[0] for r in RETENTION_TABLE]
)
def test_retention_table(
    what: str, points: list[BackupPoint], retention: Retention, expected: list[str]
) -> None:
    assert kept(points, retention) == expected, what


def test_a_failed_backup_is_never_kept_and_not_counted() -> None:
    points = [*nightly(3), BackupPoint("broken", T0 + timedelta(hours=1), good=False)]
    verdicts = {v.name: v for v in prune(points, Retention(keep_last=1))}
    assert not verdicts["broken"].keep and "not good" in verdicts["broken"].reason
    assert verdicts["b02"].keep and verdicts["b02"].reason == "keep-last 1"  # the failed one took no slot


def test_each_verdict_says_which_option_kept_it() -> None:
    reasons = {v.name: v.reason for v in prune(nightly(6, fulls_every=3), Retention(keep_last=1))}
    assert reasons == {
        "b05": "keep-last 1",
        "b04": "base of b05",
        "b03": "base of b05",
        "b02": "no keep option covers it",
        "b01": "no keep option covers it",
        "b00": "no keep option covers it",
    }


@st.composite
def fleets_of_points(draw: st.DrawFn) -> list[BackupPoint]:
    count = draw(st.integers(0, 30))
    points: list[BackupPoint] = []
    offsets = sorted(draw(st.lists(st.integers(0, 24 * 400), min_size=count, max_size=count, unique=True)))
    for i, hours in enumerate(offsets):
        good = draw(st.booleans()) or i == 0
        goods = [p.name for p in points if p.good]
        base = draw(st.sampled_from([None, *goods[-1:]])) if goods else None
        points.append(BackupPoint(f"p{i}", T0 + timedelta(hours=hours), good=good, base=base))
    return points


retentions = st.builds(
    Retention,
    keep_last=st.integers(0, 4),
    keep_hourly=st.integers(0, 3),
    keep_daily=st.integers(0, 5),
    keep_weekly=st.integers(0, 3),
    keep_monthly=st.integers(0, 3),
    keep_yearly=st.integers(0, 2),
)


@given(fleets_of_points(), retentions)
def test_retention_properties(points: list[BackupPoint], retention: Retention) -> None:
    verdicts = {v.name: v for v in prune(points, retention)}
    by_name = {p.name: p for p in points}
    assert set(verdicts) == set(by_name)
    good_newest_first = sorted((p for p in points if p.good), key=lambda p: p.taken_at, reverse=True)
    for p in good_newest_first[: retention.keep_last]:
        assert verdicts[p.name].keep  # keep-last N keeps the N newest good ones
    for v in verdicts.values():
        if v.keep:
            base = by_name[v.name].base
            assert base is None or verdicts[base].keep, f"{v.name} kept without its base {base}"
        if not by_name[v.name].good:
            assert not v.keep or v.reason.startswith("base of")
    if (
        good_newest_first
        and not retention.keeps_all
        and any(retention.count(o) for o in ("last", "hourly", "daily", "weekly", "monthly", "yearly"))
    ):
        assert verdicts[good_newest_first[0].name].keep  # any option keeps the newest good backup


MODE_TABLE = [
    (ChainState(None, None, False, 0), BackupMode.FULL, "no good backup"),
    (ChainState("b1", None, False, 0), BackupMode.FULL, "stopped"),
    (ChainState("b1", "cp1", False, 0), BackupMode.FULL, "gone from the VM's host"),
    (ChainState("b1", "cp1", True, 6), BackupMode.FULL, "limit 6"),
    (ChainState("b1", "cp1", True, 5), BackupMode.INCREMENTAL, "incremental on b1"),
]


@pytest.mark.parametrize(("state", "mode", "said"), MODE_TABLE)
def test_next_mode_table(state: ChainState, mode: BackupMode, said: str) -> None:
    got, reason = next_mode(state, max_chain=6)
    assert got == mode and said in reason


WINDOW = timedelta(hours=1)
SCHEDULE_TABLE = [
    # (what, last_fired, now, state, fire_at)
    ("created after the last fire: wait", None, T0 + timedelta(hours=3), ScheduleState.WAIT, None),
    ("exactly at the fire time: run", T0 - timedelta(days=1), T0, ScheduleState.RUN, T0),
    ("within the window: run", T0 - timedelta(days=1), T0 + timedelta(minutes=59), ScheduleState.RUN, T0),
    ("past the window: missed", T0 - timedelta(days=1), T0 + timedelta(hours=2), ScheduleState.MISSED, T0),
    ("served already: wait", T0, T0 + timedelta(minutes=5), ScheduleState.WAIT, None),
    (
        "down a week: one run for the newest",
        T0 - timedelta(days=7),
        T0 + timedelta(minutes=1),
        ScheduleState.RUN,
        T0,
    ),
]


@pytest.mark.parametrize(
    ("what", "last_fired", "now", "state", "fire_at"), SCHEDULE_TABLE, ids=[r[0] for r in SCHEDULE_TABLE]
)
def test_schedule_table(
    what: str, last_fired: datetime | None, now: datetime, state: ScheduleState, fire_at: datetime | None
) -> None:
    created = T0 + timedelta(hours=1) if last_fired is None else T0 - timedelta(days=30)
    decision = schedule_due(
        "0 2 * * *", last_fired=last_fired, created_at=created, now=now, start_window=WINDOW
    )
    assert (decision.state, decision.fire_at) == (state, fire_at), what
    assert decision.next_at > now


@pytest.mark.parametrize(
    ("expression", "valid"),
    [
        ("0 2 * * *", True),
        ("@daily", True),
        ("*/15 * * * *", True),
        ("61 * * * *", False),
        ("nightly", False),
        ("", False),
    ],
)
def test_valid_schedule(expression: str, valid: bool) -> None:
    assert valid_schedule(expression) is valid


def test_admit_respects_both_limits_counting_the_running() -> None:
    running = [PendingBackup("r1", "h1", "t1")]
    pending = [
        PendingBackup("a", "h1", "t1"),  # h1 full (1 running, limit 1)
        PendingBackup("b", "h2", "t1"),
        PendingBackup("c", "h3", "t1"),  # t1 full after b (limit 2)
        PendingBackup("d", None, "t2"),  # a stopped VM: no host limit
        PendingBackup("e", "h2", "t2"),  # h2 full after b
    ]
    assert [p.vm for p in admit(pending, running, per_host=1, per_target=2)] == ["b", "d"]
