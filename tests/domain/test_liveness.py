"""Host liveness as a table (issue 15): Up, Disconnected after a long silence, Down only when fenced."""

from __future__ import annotations

import pytest

from virtplane.domain.liveness import (
    TRANSITIONS,
    LivenessThresholds,
    Observation,
    fence_due,
    next_liveness,
    observe,
)
from virtplane.domain.resources import HostConnection

UP, DISC, DOWN, UNKNOWN = (
    HostConnection.UP,
    HostConnection.DISCONNECTED,
    HostConnection.DOWN,
    HostConnection.UNKNOWN,
)
T = LivenessThresholds(disconnected_after_s=30, reconnected_after_s=60, fence_after_s=90)


def test_every_state_answers_every_observation() -> None:
    assert set(TRANSITIONS) == {(c, o) for c in HostConnection for o in Observation}


@pytest.mark.parametrize(
    ("fenced", "answers", "answering_for", "silent_for", "expected"),
    [
        (True, True, 1000, 0, Observation.FENCED),  # the fence wins over a host that answers
        (True, False, 0, 1, Observation.FENCED),
        (False, True, 59.9, 0, Observation.ANSWERS_BRIEFLY),
        (False, True, 60, 0, Observation.ANSWERS),
        (False, False, 0, 29.9, Observation.SILENT_BRIEFLY),
        (False, False, 0, 30, Observation.SILENT),
    ],
)
def test_observe(
    fenced: bool, answers: bool, answering_for: float, silent_for: float, expected: Observation
) -> None:
    got = observe(
        fenced=fenced, answers=answers, answering_for_s=answering_for, silent_for_s=silent_for, thresholds=T
    )
    assert got is expected


@pytest.mark.parametrize(
    ("current", "observation", "expected"),
    [
        (UNKNOWN, Observation.ANSWERS_BRIEFLY, UP),  # a new host is Up at its first answer
        (UNKNOWN, Observation.SILENT_BRIEFLY, UNKNOWN),
        (UNKNOWN, Observation.SILENT, DISC),
        (UP, Observation.SILENT_BRIEFLY, UP),  # a short drop is tolerated
        (UP, Observation.SILENT, DISC),
        (UP, Observation.FENCED, DOWN),  # an admin's confirmation
        (DISC, Observation.ANSWERS_BRIEFLY, DISC),  # hysteresis: one answer is not enough
        (DISC, Observation.ANSWERS, UP),
        (DISC, Observation.SILENT, DISC),  # silence alone never means Down
        (DISC, Observation.FENCED, DOWN),
        (DOWN, Observation.FENCED, DOWN),  # a fenced host that answers stays Down
        (DOWN, Observation.ANSWERS, DISC),  # the fence cleared: it must prove itself again
        (DOWN, Observation.SILENT, DISC),
    ],
)
def test_transitions(current: HostConnection, observation: Observation, expected: HostConnection) -> None:
    assert next_liveness(current, observation) is expected


def test_only_a_fence_leads_to_down() -> None:
    for (current, observation), target in TRANSITIONS.items():
        if target is DOWN:
            assert observation is Observation.FENCED, (current, observation)


def _run(probes: list[tuple[float, bool]]) -> tuple[list[HostConnection], list[bool]]:
    """Feed timed probes (time, answered) as the host controller does; return the liveness
    after each and whether fencing was due."""
    state, answering_since, silent_since = UP, 0.0, None
    states, fences = [], []
    for t, answered in probes:
        if answered:
            silent_since = None
            answering_since = answering_since if answering_since is not None else t
        else:
            answering_since = None  # type: ignore[assignment]
            silent_since = silent_since if silent_since is not None else t
        silent_for = t - silent_since if silent_since is not None else 0.0
        answering_for = t - answering_since if answering_since is not None else 0.0
        obs = observe(
            fenced=False,
            answers=answered,
            answering_for_s=answering_for,
            silent_for_s=silent_for,
            thresholds=T,
        )
        state = next_liveness(state, obs)
        states.append(state)
        fences.append(fence_due(state, silent_for, T))
    return states, fences


def test_a_flapping_host_is_never_fenced() -> None:
    """Silent 25 s, answers 5 s, over and over: never Disconnected, never fenced."""
    probes = [(float(t), t % 30 >= 25) for t in range(0, 600, 5)]
    states, fences = _run(probes)
    assert DISC not in states and not any(fences)


def test_a_host_that_answers_now_and_then_while_disconnected_is_not_fenced() -> None:
    """Long silence (Disconnected), then an answer every 80 s: the fence clock restarts each time."""
    probes = [(float(t), False) for t in range(0, 40, 5)]
    probes += [(float(t), t % 80 == 0) for t in range(40, 800, 5)]
    states, fences = _run(probes)
    assert states[-1] is DISC, "answering now and then is not enough to be Up"
    assert not any(fences)


def test_a_dead_host_is_fenced_after_the_threshold() -> None:
    states, fences = _run([(float(t), t < 10) for t in range(0, 200, 5)])
    first_fence = fences.index(True)
    assert states[first_fence] is DISC
    assert first_fence * 5 - 10 >= T.fence_after_s, "not before fence_after_s of silence"


@pytest.mark.parametrize(
    ("liveness", "silent_for", "due"),
    [(DISC, 90, True), (DISC, 89, False), (UP, 1000, False), (DOWN, 1000, False), (UNKNOWN, 1000, False)],
)
def test_fence_due(liveness: HostConnection, silent_for: float, due: bool) -> None:
    assert fence_due(liveness, silent_for, T) is due
