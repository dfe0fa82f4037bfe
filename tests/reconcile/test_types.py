import math

import pytest

from virtplane.reconcile.types import Request, Result, TerminalError


def test_request_is_a_hashable_value_naming_one_object() -> None:
    assert Request("vm", "a") == Request("vm", "a")
    assert len({Request("vm", "a"), Request("vm", "a"), Request("host", "a")}) == 2
    assert str(Request("vm", "a")) == "vm/a"


def test_result_defaults_to_done() -> None:
    assert Result().requeue_after is None


@pytest.mark.parametrize("delay", [-1.0, math.inf, math.nan])
def test_result_rejects_delays_that_are_not_finite_and_non_negative(delay: float) -> None:
    with pytest.raises(ValueError, match="requeue_after"):
        Result(requeue_after=delay)


def test_result_accepts_zero_delay() -> None:
    assert Result(requeue_after=0.0).requeue_after == 0.0


def test_terminal_error_is_an_exception() -> None:
    assert issubclass(TerminalError, Exception)
