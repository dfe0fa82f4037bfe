import pytest

from virtplane.reconcile.ratelimit import ItemBackoff


def test_delay_doubles_per_failure_from_base() -> None:
    backoff = ItemBackoff(base=0.005, cap=300.0)
    delays = [backoff.when("vm/a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert backoff.failures("vm/a") == 5


def test_delay_is_capped() -> None:
    backoff = ItemBackoff(base=1.0, cap=10.0)
    assert [backoff.when("k") for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_huge_failure_counts_stay_at_the_cap() -> None:
    backoff = ItemBackoff(base=1.0, cap=300.0)
    for _ in range(2000):
        delay = backoff.when("k")
    assert delay == 300.0


def test_keys_back_off_independently() -> None:
    backoff = ItemBackoff(base=1.0, cap=100.0)
    backoff.when("a")
    backoff.when("a")
    assert backoff.when("b") == 1.0
    assert backoff.failures("a") == 2
    assert backoff.failures("b") == 1
    assert len(backoff) == 2


def test_forget_resets_to_base() -> None:
    backoff = ItemBackoff(base=1.0, cap=100.0)
    backoff.when("a")
    backoff.when("a")
    backoff.forget("a")
    backoff.forget("never-seen")
    assert backoff.failures("a") == 0
    assert len(backoff) == 0
    assert backoff.when("a") == 1.0


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_rejects_nonsense_settings(base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        ItemBackoff(base=base, cap=cap)
