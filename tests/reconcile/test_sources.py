import asyncio
import logging
from collections import Counter

import pytest

from virtplane.reconcile.sources import resync_slices, resync_ticker
from virtplane.reconcile.types import Request


class _Stop(Exception):
    pass


class FakeTime:
    """A sleep that only moves a counter, and ends the ticker after ``limit`` seconds."""

    def __init__(self, limit: float) -> None:
        self.now = 0.0
        self.limit = limit
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.now >= self.limit - 1e-9:
            raise _Stop


def fleet(size: int) -> list[Request]:
    return [Request("vm", f"vm-{i}") for i in range(size)]


def test_slices_are_even_and_cover_every_key_once() -> None:
    keys = fleet(10_050)
    groups = resync_slices(keys, 100)
    assert len(groups) == 100
    assert {len(group) for group in groups} == {100, 101}
    flattened = [key for group in groups for key in group]
    assert sorted(flattened, key=str) == sorted(keys, key=str)


def test_slices_dedupe_and_handle_small_fleets() -> None:
    keys = fleet(3)
    assert [len(group) for group in resync_slices(keys + keys, 100)] == [1, 1, 1]
    assert resync_slices([], 100) == []


async def test_ticker_spreads_every_key_over_each_period() -> None:
    keys = fleet(10_000)
    time = FakeTime(limit=2 * 600.0)
    enqueued: list[tuple[float, Request]] = []
    with pytest.raises(_Stop):
        await resync_ticker(
            lambda: keys, lambda key: enqueued.append((time.now, key)), 600.0, sleep=time.sleep
        )

    assert time.sleeps == [6.0] * 200  # 100 slices per period, two periods
    first_pass = [key for at, key in enqueued if at < 600.0]
    assert Counter(first_pass) == Counter(keys), "each key exactly once per period"
    per_instant = Counter(at for at, _ in enqueued)
    assert max(per_instant.values()) == 100, "no thundering herd: at most 1/100 of the fleet at once"
    times_by_key: dict[Request, list[float]] = {}
    for at, key in enqueued:
        times_by_key.setdefault(key, []).append(at)
    assert all(second - first == pytest.approx(600.0) for first, second in times_by_key.values())


async def test_a_fleet_larger_than_the_rate_cap_gets_a_longer_period() -> None:
    """Row 7 of issue 13: idle CPU is keys / period x the no-op cost; the cap bounds it."""
    keys = fleet(10_000)
    time = FakeTime(limit=2 * 200.0)
    enqueued: list[tuple[float, Request]] = []
    with pytest.raises(_Stop):
        await resync_ticker(
            lambda: keys,
            lambda key: enqueued.append((time.now, key)),
            60.0,
            max_per_s=50.0,
            sleep=time.sleep,
        )
    assert time.sleeps == [2.0] * 200  # 10,000 keys at 50 per s: a pass takes 200 s, not 60
    assert Counter(key for at, key in enqueued if at < 200.0) == Counter(keys)


async def test_a_fleet_within_the_rate_cap_keeps_the_period() -> None:
    time = FakeTime(limit=60.0)
    with pytest.raises(_Stop):
        await resync_ticker(lambda: fleet(1000), lambda key: None, 60.0, max_per_s=50.0, sleep=time.sleep)
    assert time.sleeps == [0.6] * 100


async def test_ticker_sees_keys_added_between_periods() -> None:
    keys = fleet(2)
    time = FakeTime(limit=2 * 10.0)
    enqueued: list[Request] = []

    def listing() -> list[Request]:
        snapshot = list(keys)
        keys.append(Request("vm", f"new-{len(keys)}"))
        return snapshot

    with pytest.raises(_Stop):
        await resync_ticker(listing, enqueued.append, 10.0, sleep=time.sleep)
    assert Request("vm", "new-2") in enqueued


async def test_ticker_survives_a_failing_listing(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime(limit=3 * 10.0)
    enqueued: list[Request] = []
    attempts = 0

    def flaky_listing() -> list[Request]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("database restarting")
        return fleet(2)

    with caplog.at_level(logging.ERROR, logger="virtplane.reconcile"), pytest.raises(_Stop):
        await resync_ticker(flaky_listing, enqueued.append, 10.0, sleep=time.sleep)
    assert time.sleeps[0] == 10.0
    assert Counter(enqueued) == Counter(fleet(2) * 2)
    assert any("could not list" in record.getMessage() for record in caplog.records)


async def test_ticker_with_no_keys_just_waits_a_period() -> None:
    time = FakeTime(limit=30.0)
    with pytest.raises(_Stop):
        await resync_ticker(list, lambda key: None, 10.0, sleep=time.sleep)
    assert time.sleeps == [10.0, 10.0, 10.0]


async def test_ticker_stops_when_cancelled() -> None:
    task = asyncio.create_task(resync_ticker(lambda: fleet(1), lambda key: None, 3600.0))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    ("period", "slices", "max_per_s"), [(0.0, 10, None), (10.0, 0, None), (10.0, 10, 0.0)]
)
async def test_ticker_rejects_nonsense_settings(period: float, slices: int, max_per_s: float | None) -> None:
    with pytest.raises(ValueError):
        await resync_ticker(list, lambda key: None, period, slices=slices, max_per_s=max_per_s)
