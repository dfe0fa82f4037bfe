"""Usage history in memory: the last hour at the collection interval, a day downsampled.

Compact on purpose (10,000 VMs): one ``array('f')`` per object and resolution, its metrics
interleaved (slot-major), 4 bytes a figure, and no timestamps per object. Time is one shared
``Timeline`` of collection rounds ("ticks"): an object's figure of tick ``k`` lives in slot
``k % slots``, and the tick's time is in the timeline. A tick an object missed (not running,
its host unreachable) holds NaN, so a stale slot is never read as new. A day bucket (``per``
ticks) is the mean of its known figures, written once the bucket is over, from the hour ring,
which still holds it (``per`` < the hour's slots).

Not in the store: usage is telemetry, not intent (docs/decisions.md); a new leader starts
with an empty history.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

NAN = math.nan


@dataclass(frozen=True)
class Resolution:
    hour_slots: int = 360  # an hour at 10 s
    per: int = 30  # ticks per day bucket: 5 min at 10 s
    day_slots: int = 288  # a day of 5-min buckets

    def __post_init__(self) -> None:
        if not (0 < self.per < self.hour_slots) or self.day_slots <= 0:
            raise ValueError("a day bucket must fit in the hour ring")


class Timeline:
    """When each tick happened (wall time): shared by every series of one collector."""

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution
        self.tick = -1  # the last tick begun
        self._hour = array("d", [NAN]) * resolution.hour_slots
        self._day = array("d", [NAN]) * (resolution.day_slots + 1)  # the day's, and the one filling

    def advance(self, at: float) -> int:
        self.tick += 1
        self._hour[self.tick % self.resolution.hour_slots] = at
        if self.tick % self.resolution.per == 0:
            self._day[(self.tick // self.resolution.per) % len(self._day)] = at
        return self.tick

    def time_of(self, tick: int) -> float:
        return self._hour[tick % self.resolution.hour_slots]

    def bucket_time(self, bucket: int) -> float:
        return self._day[bucket % len(self._day)]


class Series:
    """One object's figures (``width`` metrics) over the timeline's ticks."""

    __slots__ = ("_day", "_hour", "last", "width")

    def __init__(self, width: int, resolution: Resolution) -> None:
        self.width = width
        self._hour = array("f", [NAN]) * (width * resolution.hour_slots)
        self._day = array("f", [NAN]) * (width * resolution.day_slots)
        self.last = -1  # the last tick written

    def write(self, tick: int, values: tuple[float, ...], resolution: Resolution) -> None:
        if len(values) != self.width:
            raise ValueError(f"{len(values)} figures for a series of {self.width}")
        if tick <= self.last:
            raise ValueError(f"tick {tick} is not after {self.last}")
        hour, per = resolution.hour_slots, resolution.per
        if self.last >= 0:
            for skipped in range(max(self.last + 1, tick - hour + 1), tick):
                self._put(self._hour, skipped % hour, None)
            first_bucket = max(self.last // per, tick // per - resolution.day_slots)
            for bucket in range(first_bucket, tick // per):
                self._put(self._day, bucket % resolution.day_slots, self._mean(bucket, tick, resolution))
        self._put(self._hour, tick % hour, values)
        self.last = tick

    def _put(self, ring: array[float], slot: int, values: tuple[float, ...] | None) -> None:
        start = slot * self.width
        ring[start : start + self.width] = array("f", values if values is not None else [NAN] * self.width)

    def _mean(self, bucket: int, now: int, resolution: Resolution) -> tuple[float, ...] | None:
        """The mean of the bucket's known figures, from the hour ring (ticks before ``now`` that
        it still holds, up to ``last``: later ones were missed); None when none is known."""
        hour, per = resolution.hour_slots, resolution.per
        ticks = range(max(bucket * per, now - hour + 1), min((bucket + 1) * per, self.last + 1))
        sums, counts = [0.0] * self.width, [0] * self.width
        for tick in ticks:
            row = self.hour_row(tick, resolution)
            for i, value in enumerate(row):
                if not math.isnan(value):
                    sums[i] += value
                    counts[i] += 1
        if not any(counts):
            return None
        return tuple(s / c if c else NAN for s, c in zip(sums, counts, strict=True))

    def hour_row(self, tick: int, resolution: Resolution) -> tuple[float, ...]:
        """Tick ``tick``'s figures; NaN for each when the ring no longer (or not yet) holds it."""
        if not (self.last - resolution.hour_slots < tick <= self.last):
            return (NAN,) * self.width
        start = (tick % resolution.hour_slots) * self.width
        return tuple(self._hour[start : start + self.width])

    def day_row(self, bucket: int, resolution: Resolution) -> tuple[float, ...]:
        """A finished bucket's means; NaN when it is not (or no longer) in the day ring."""
        newest = self.last // resolution.per  # the bucket being filled: not written yet
        if not (newest - resolution.day_slots <= bucket < newest):
            return (NAN,) * self.width
        start = (bucket % resolution.day_slots) * self.width
        return tuple(self._day[start : start + self.width])

    @property
    def nbytes(self) -> int:
        return (len(self._hour) + len(self._day)) * self._hour.itemsize


@dataclass(frozen=True)
class Columns:
    """A chart's input: times (Unix seconds) and one column per metric; None for no figure."""

    t: list[float]
    columns: dict[str, list[float | None]]


def read(series: Series | None, timeline: Timeline, metrics: tuple[str, ...], since: float) -> Columns:
    """The figures since ``since`` (wall time): the day's buckets for what is older than the
    hour ring holds, then the hour's ticks."""
    resolution = timeline.resolution
    hour, per = resolution.hour_slots, resolution.per
    rows: list[tuple[float, tuple[float, ...]]] = []
    now = timeline.tick
    first_hour_tick = max(0, now - hour + 1)
    if now >= 0 and timeline.time_of(first_hour_tick) > since:
        newest = now // per
        for bucket in range(max(0, newest - resolution.day_slots), newest):
            at = timeline.bucket_time(bucket)
            if (bucket + 1) * per <= first_hour_tick and not math.isnan(at) and at >= since:
                row = series.day_row(bucket, resolution) if series else (NAN,) * len(metrics)
                rows.append((at, row))
    for tick in range(first_hour_tick, now + 1):
        at = timeline.time_of(tick)
        if at >= since:
            rows.append((at, series.hour_row(tick, resolution) if series else (NAN,) * len(metrics)))
    columns: dict[str, list[float | None]] = {
        name: [None if math.isnan(row[i]) else round(row[i], 3) for _, row in rows]
        for i, name in enumerate(metrics)
    }
    return Columns([round(at, 3) for at, _ in rows], columns)


__all__ = ["Columns", "Resolution", "Series", "Timeline", "read"]
