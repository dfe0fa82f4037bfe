"""Rows 11-16's arithmetic (bench/real_bounds.py) and the session's refusal to crash without its
parts: ratios to the bounds of the same run, met / not met, None where a part is missing."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from bench import real
from bench import real_bounds as rb
from bench.__main__ import SHORT_ROWS, parse_rows
from bench.rows import Row
from bench.sizes import SHORT

LIMITS = {"outbound": 2, "inbound": 1, "per_cluster": 5}


def test_start_is_the_median_of_ours_over_the_median_of_libvirts_own_boots() -> None:
    row = rb.start_row([5.0, 4.0, 9.0], [4.0, 3.0, 100.0], "tcg")
    assert (row.number, row.figure, row.met) == (11, 1.25, True)  # 5 / 4: medians, not means
    assert rb.start_row([6.0], [4.0], "tcg").met is False  # 1.5 > 1.25
    assert row.note.startswith("tcg;")


def test_a_migration_is_held_to_libvirts_migration_of_the_guest_paused() -> None:
    row = rb.migration_row(12, "an idle guest", [1.5, 1.2, 3.0], [1.0, 0.8, 1.0], 192, 1920.0, "tcg")
    assert (row.figure, row.met, row.target) == (1.5, True, "<= 1.5")
    assert row.details["memory_over_bandwidth_s"] == 0.1  # 192 MiB over 1,920 MiB/s
    assert "ours 15.0 x that" in row.note
    busy = rb.migration_row(13, "a busy guest", [3.5], [1.0], 192, None, "tcg")
    assert (busy.figure, busy.met, busy.target) == (3.5, False, "<= 3")
    assert busy.details["memory_over_bandwidth_s"] is None  # no link measured: no floor, still a figure


def test_a_drain_with_one_target_is_bound_by_its_migrations_one_after_another() -> None:
    row = rb.drain_row(4.4, {"d-0": 1.0, "d-1": 1.0, "d-2": 2.0}, 1, LIMITS, "tcg")
    assert row.details["lower_bound_s"] == 4.0 and (row.figure, row.met) == (1.1, True)
    two_targets = rb.drain_row(4.4, {"d-0": 1.0, "d-1": 1.0, "d-2": 2.0}, 2, LIMITS, "tcg")
    assert two_targets.details["lower_bound_s"] == 2.0 and two_targets.met is False


def test_a_failover_is_bound_by_the_larger_threshold_not_their_sum_plus_a_boot() -> None:
    failover = rb.Failover(disconnected_after_s=30.0, fence_after_s=60.0, measured_s=99.0)
    assert rb.failover_bound_s(failover, 6.0) == 66.0
    row = rb.failover_row(16, "default", failover, 6.0, "tcg")
    assert (row.number, row.figure, row.met) == (16, 1.5, False), "within the ratio, over issue 38's 30 s"
    quick = rb.failover_row(16, "default", rb.Failover(10.0, 15.0, 25.0), 6.0, "tcg")
    assert (quick.figure, quick.met) == (1.19, True)
    assert rb.failover_row(15, "aggressive", rb.Failover(1.0, 2.0, 14.0), 5.0, "tcg").met is False
    assert rb.failover_row(15, "aggressive", rb.Failover(1.0, 2.0, 9.0), 7.0, "tcg").met is True


@pytest.mark.parametrize(
    "make",
    [
        lambda: rb.start_row([], [4.0], "tcg"),
        lambda: rb.start_row([4.0], [], "tcg"),
        lambda: rb.migration_row(12, "an idle guest", [1.0], [0.0], 192, 1000.0, "tcg"),
        lambda: rb.drain_row(None, {"d-0": 1.0}, 1, LIMITS, "tcg"),
        lambda: rb.drain_row(3.0, {}, 1, LIMITS, "tcg"),
        lambda: rb.failover_row(15, "aggressive", rb.Failover(1.0, 2.0, None), 5.0, "tcg"),
        lambda: rb.failover_row(15, "aggressive", rb.Failover(1.0, 2.0, 10.0), None, "tcg"),
    ],
    ids=[
        "no boot of ours",
        "no bound",
        "a bound of zero",
        "no makespan",
        "no guests",
        "no failover",
        "no boot",
    ],
)
def test_a_missing_part_is_no_figure_and_not_measured(make: Callable[[], Row]) -> None:
    row = make()
    assert (row.figure, row.met) == (None, None)


def test_without_root_every_real_row_says_why_and_nothing_crashes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(real.os, "geteuid", lambda: 1000)
    sizes = dataclasses.replace(SHORT, selected=frozenset({11, 12, 14}))
    rows = asyncio.run(real.run(tmp_path, sizes, 0.0, None))
    assert [(r.number, r.figure, r.met) for r in rows] == [
        (11, None, None),
        (12, None, None),
        (14, None, None),
    ]
    assert all("need root" in r.note for r in rows)


def test_the_real_rows_are_eleven_to_sixteen_and_a_short_run_leaves_them_out() -> None:
    assert parse_rows("11,16") == frozenset({11, 16})
    assert sorted(SHORT_ROWS) == list(range(1, 11))


def test_a_rig_that_does_not_start_leaves_every_row_without_a_figure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bench import real_rig

    @contextlib.asynccontextmanager
    async def no_rig(work: Path) -> AsyncIterator[None]:
        raise RuntimeError("libvirtd did not start")
        yield

    monkeypatch.setattr(real, "missing_prerequisites", lambda: None)
    monkeypatch.setattr(real_rig, "rig_session", no_rig)
    rows = asyncio.run(
        real.run(tmp_path, dataclasses.replace(SHORT, selected=frozenset({13, 15})), 0.0, None)
    )
    assert [(r.number, r.figure) for r in rows] == [(13, None), (15, None)]
    assert all("the rig failed: RuntimeError: libvirtd did not start" in r.note for r in rows)
