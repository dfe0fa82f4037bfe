import pytest

from virtplane.reconcile.clock import FakeClock, MonotonicClock, ObservableClock


def test_fake_clock_moves_only_when_advanced() -> None:
    clock = FakeClock(start=10.0)
    assert clock.now() == 10.0
    clock.advance(2.5)
    assert clock.now() == 12.5


def test_fake_clock_refuses_to_go_back() -> None:
    with pytest.raises(ValueError):
        FakeClock().advance(-1.0)


def test_fake_clock_announces_each_advance_until_unsubscribed() -> None:
    clock = FakeClock()
    seen: list[float] = []
    unsubscribe = clock.subscribe(lambda: seen.append(clock.now()))
    clock.advance(1.0)
    clock.advance(2.0)
    unsubscribe()
    unsubscribe()  # idempotent
    clock.advance(4.0)
    assert seen == [1.0, 3.0]


def test_only_the_fake_clock_is_observable() -> None:
    assert isinstance(FakeClock(), ObservableClock)
    assert not isinstance(MonotonicClock(), ObservableClock)


def test_monotonic_clock_never_goes_back() -> None:
    clock = MonotonicClock()
    first = clock.now()
    assert clock.now() >= first
