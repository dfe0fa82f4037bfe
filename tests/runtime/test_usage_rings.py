"""The usage rings (``runtime/usage_rings``) against a plain list of what was written.

A model keeps every (tick, figure) written; whatever ticks an object missed, the hour ring
reads back exactly the figures of the ticks it still holds (NaN for the missed ones), and
each finished day bucket reads the mean of its known figures.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from virtplane.runtime.usage_rings import Resolution, Series, Timeline, read

SMALL = Resolution(hour_slots=12, per=4, day_slots=5)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 1000, width=32)), min_size=1, max_size=60))
def test_the_rings_read_back_what_the_model_holds(figures: list[float | None]) -> None:
    """``figures[k]`` is tick k's figure, None where the object missed tick k."""
    series = Series(1, SMALL)
    for tick, figure in enumerate(figures):
        if figure is not None:
            series.write(tick, (figure,), SMALL)
    last = max((k for k, f in enumerate(figures) if f is not None), default=-1)
    if last < 0:
        return
    for tick in range(max(0, last - SMALL.hour_slots + 1), last + 1):
        want = figures[tick]
        assert _same(series.hour_row(tick, SMALL)[0], math.nan if want is None else want)
    assert math.isnan(series.hour_row(last - SMALL.hour_slots, SMALL)[0])  # gone from the hour
    assert math.isnan(series.hour_row(last + 1, SMALL)[0])  # not yet written
    newest = last // SMALL.per
    for bucket in range(max(0, newest - SMALL.day_slots), newest):
        known = [f for f in figures[bucket * SMALL.per : (bucket + 1) * SMALL.per] if f is not None]
        # a bucket is averaged at the write after it: what the hour ring held then
        first_after = next(
            k for k in range(last + 1) if k >= (bucket + 1) * SMALL.per and figures[k] is not None
        )
        held = [
            f
            for k, f in enumerate(figures[bucket * SMALL.per : (bucket + 1) * SMALL.per], bucket * SMALL.per)
            if f is not None and k > first_after - SMALL.hour_slots
        ]
        want = sum(held) / len(held) if held else math.nan
        assert known or math.isnan(want)
        assert _same(series.day_row(bucket, SMALL)[0], want), (bucket, held)


def test_reading_columns_takes_the_day_then_the_hour() -> None:
    timeline = Timeline(SMALL)
    series = Series(2, SMALL)
    for tick in range(30):
        timeline.advance(1000.0 + 10 * tick)
        series.write(tick, (float(tick), 1.0), SMALL)
    hour = read(series, timeline, ("a", "b"), since=1000.0 + 10 * 25)
    assert hour.t == [1250.0, 1260.0, 1270.0, 1280.0, 1290.0]
    assert hour.columns["a"] == [25.0, 26.0, 27.0, 28.0, 29.0]
    day = read(series, timeline, ("a", "b"), since=0.0)
    # the hour ring holds ticks 18-29; the day's finished buckets before it: 2 (ticks 8-11), 3 (12-15)
    assert day.t == [1080.0, 1120.0] + [1000.0 + 10 * tick for tick in range(18, 30)]
    assert day.columns["a"][:3] == [9.5, 13.5, 18.0]
    assert day.columns["b"] == [1.0] * len(day.t)


def test_a_series_that_missed_ticks_reads_none_for_them() -> None:
    timeline = Timeline(SMALL)
    series = Series(1, SMALL)
    for tick in range(5):
        timeline.advance(float(tick))
        if tick != 2:
            series.write(tick, (7.0,), SMALL)
    assert read(series, timeline, ("a",), since=0.0).columns["a"] == [7.0, 7.0, None, 7.0, 7.0]
    assert read(None, timeline, ("a",), since=3.0).columns["a"] == [None, None]


def test_a_write_must_move_forward_and_fit() -> None:
    series = Series(2, SMALL)
    series.write(3, (1.0, 2.0), SMALL)
    with pytest.raises(ValueError, match="not after"):
        series.write(3, (1.0, 2.0), SMALL)
    with pytest.raises(ValueError, match="figures"):
        series.write(4, (1.0,), SMALL)
