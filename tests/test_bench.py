"""The benchmarks' own arithmetic: the drain's lower bound, the report's table, the row selection."""

from __future__ import annotations

import argparse

import pytest
from bench.__main__ import parse_rows
from bench.against import Figure, figures, ratios
from bench.drain import lower_bound, migration_seconds
from bench.report import table
from bench.rows import Row, summary_ms

LIMITS = {"outbound": 2, "inbound": 1, "per_cluster": 5}


@pytest.mark.parametrize(
    ("memory_mib", "seconds"),
    [(128, 0.15), (100, 0.1), (2048, 2.05), (1, 0.05)],
    ids=["part of a tick counts whole", "an exact number of ticks", "2 GiB", "one tick at least"],
)
def test_migration_seconds_follow_the_simulators_ticks(memory_mib: int, seconds: float) -> None:
    # 1,000 MiB/s in ticks of 0.05 s: 50 MiB a tick, switched over in the tick that sends the last
    assert migration_seconds(memory_mib) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("durations", "only_target", "targets", "bound"),
    [
        ({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, {}, 3, 2.0),  # two at a time out of the source
        ({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, {}, 1, 4.0),  # one target takes one at a time
        ({"a": 5.0, "b": 1.0, "c": 1.0}, {}, 2, 5.0),  # the longest one alone
        ({"a": 2.0, "b": 2.0, "c": 1.0, "d": 1.0}, {"a": "t1", "b": "t1"}, 2, 4.0),  # t1 only
    ],
    ids=["outbound", "inbound", "longest", "forced to one target"],
)
def test_lower_bound_of_a_drain(
    durations: dict[str, float], only_target: dict[str, str], targets: int, bound: float
) -> None:
    assert lower_bound(durations, only_target, targets, **LIMITS) == pytest.approx(bound)


def test_table_says_which_targets_were_met() -> None:
    rows = [
        Row(1, "writes", 1200.0, "per s", ">= 1,000 per s", True, ratio=0.1),
        Row(4, "one operation", 35.5, "ms", "<= 20 ms", False),
        Row(8, "first page", None, "ms", "<= 50 ms", None, note="lists are not paged"),
    ]
    result = {
        "mode": "short",
        "date": "2026-01-01T00:00:00+00:00",
        "duration_s": 1,
        "commit": "abc",
        "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 1, "python": "3", "sqlite": "3", "kernel": "6"},
        "load_average": {"start": [0.0, 0.0, 0.0], "end": [0.0, 0.0, 0.0]},
        "ceiling_sqlite_tx_per_s": 12000,
        "rows": [row.as_json() for row in rows],
    }
    text = table(result)
    assert "| 1 | writes | 1,200.0 | per s | 0.1 | >= 1,000 per s | met |" in text
    assert "| 4 | one operation | 35.5 | ms | — | <= 20 ms | **not met** |" in text
    assert "| 8 | first page | — | ms | — | <= 50 ms | not measured |" in text
    assert "- row 8: lists are not paged" in text


def test_summary_of_latencies() -> None:
    stats = summary_ms([i / 1000 for i in (10, 3, 5, 1, 2, 4, 6, 7, 8, 9)])
    assert (stats["median_ms"], stats["p90_ms"], stats["min_ms"], stats["max_ms"]) == (5.5, 9.0, 1.0, 10.0)


def test_rows_are_one_to_twenty_seven() -> None:
    assert parse_rows("1, 6, 19, 22") == frozenset({1, 6, 19, 22})
    assert parse_rows("23,24,25") == frozenset({23, 24, 25})  # placement, rebalance, PostgreSQL
    with pytest.raises(argparse.ArgumentTypeError, match="no such rows: \\[28\\]"):
        parse_rows("2,28")


BENCH_OUTPUT = """raw-SQLite ceiling: 22,661 transactions per s
row 1: 550.3 writes per s (>= 1,000 per s)
       {'one_client': {'per_s': 434.2}}
row 3: 238.2 VMs per s (the slower way) (Stop 238.2 per s, Start 250.3 per s (from the request))
row 4: 11.2 ms (median, worst of the three) (Start/Stop/Migrate medians: Start 8.9 ms)
row 6: None x lower bound (this build has no drain)
"""


def test_a_comparison_reads_each_rows_figure_from_the_benchs_output() -> None:
    found = figures(BENCH_OUTPUT)
    assert found == {
        1: Figure(1, 550.3, "writes per s"),
        3: Figure(3, 238.2, "VMs per s"),
        4: Figure(4, 11.2, "ms"),
        6: Figure(6, None, "x lower bound"),
    }


def test_a_comparison_divides_within_each_pair_and_skips_what_one_side_lacks() -> None:
    this = {1: Figure(1, 600.0, "writes per s"), 6: Figure(6, 1.0, "x")}
    pairs = [
        (this, {1: Figure(1, 500.0, "writes per s"), 6: Figure(6, None, "x")}),
        ({1: Figure(1, 300.0, "writes per s")}, {1: Figure(1, 200.0, "writes per s")}),
    ]
    assert ratios(pairs) == {1: [pytest.approx(1.2), pytest.approx(1.5)]}


def test_a_postgres_row_is_met_within_half_of_its_sqlite_rows_ratio_of_the_same_run() -> None:
    from bench.postgres import judge

    rows = [
        Row(1, "writes", 300.0, "per s", "", False, ratio=0.04),
        Row(25, "writes, on PostgreSQL", 90.0, "per s", "", None, ratio=0.019),
        Row(2, "cold start", 200.0, "per s", "", False, ratio=0.03),
        Row(26, "cold start, on PostgreSQL", 80.0, "per s", "", None, ratio=0.02),
        Row(27, "bulk, on PostgreSQL", 30.0, "per s", "", None, ratio=0.007),  # row 3 not run
    ]
    judge(rows)
    assert [(row.number, row.met) for row in rows[1::2] + rows[4:]] == [(25, False), (26, True), (27, None)]
    assert "0.47 of row 1's ratio (0.04)" in rows[1].note
    assert "row 3 not measured" in rows[4].note


def test_the_postgres_rows_are_rows_of_a_full_run_not_of_the_short_one() -> None:
    from bench.__main__ import ALL_ROWS, SHORT_ROWS

    assert {25, 26, 27} <= ALL_ROWS and not {25, 26, 27} & SHORT_ROWS
    assert parse_rows("25,27") == frozenset({25, 27})
