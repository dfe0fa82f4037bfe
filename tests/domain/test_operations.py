"""Applicability and supersede rules of DESIGN.md §4, as tables."""

from __future__ import annotations

import pytest

from virtplane.domain.operations import ActiveOperation, admit
from virtplane.domain.resources import OperationType as T
from virtplane.domain.resources import RunPolicy as P
from virtplane.domain.resources import VMPhase as V

# (type, policy, phase) -> allowed
APPLICABILITY = [
    (T.START, P.MANUAL, V.STOPPED, True),
    (T.START, P.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, V.STOPPED, True),
    (T.START, P.ALWAYS_ON, V.STOPPED, False),
    (T.START, P.ALWAYS_OFF, V.STOPPED, False),
    (T.START, P.MANUAL, V.RUNNING, False),
    (T.STOP, P.MANUAL, V.RUNNING, True),
    (T.STOP, P.MANUAL, V.STARTING, True),
    (T.STOP, P.MANUAL, V.PAUSED, True),
    (T.STOP, P.MANUAL, V.PENDING, True),
    (T.STOP, P.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, V.RUNNING, True),
    (T.STOP, P.MANUAL, V.STOPPED, False),
    (T.STOP, P.ALWAYS_ON, V.RUNNING, False),
    (T.STOP, P.ALWAYS_OFF, V.RUNNING, False),
    (T.RESTART, P.ALWAYS_ON, V.RUNNING, True),
    (T.RESTART, P.MANUAL, V.RUNNING, True),
    (T.RESTART, P.ALWAYS_ON_UNLESS_STOPPED_MANUALLY, V.RUNNING, True),
    (T.RESTART, P.ALWAYS_OFF, V.RUNNING, False),
    (T.RESTART, P.MANUAL, V.STOPPED, False),
    (T.MIGRATE, P.ALWAYS_ON, V.RUNNING, True),
    (T.MIGRATE, P.MANUAL, V.STOPPED, False),
    (T.EVICT, P.MANUAL, V.RUNNING, True),
    *[(T.RESTORE, p, v, True) for p in P for v in V],
]


@pytest.mark.parametrize(("kind", "policy", "phase", "allowed"), APPLICABILITY)
def test_applicability(kind: T, policy: P, phase: V, allowed: bool) -> None:
    admission = admit(kind, False, policy, phase, [])
    assert admission.allowed is allowed, admission.message
    if not allowed:
        assert admission.reason == "NotApplicable"
        assert kind.value in admission.message


def test_refusals_say_why() -> None:
    assert "Restart" in admit(T.STOP, False, P.ALWAYS_ON, V.RUNNING, []).message
    assert "always on" in admit(T.START, False, P.ALWAYS_ON, V.STOPPED, []).message


def op(kind: T, force: bool = False, started: bool = True) -> ActiveOperation:
    return ActiveOperation(f"{kind.value.lower()}-1", kind, force, started)


# (new type, new force, active operation) -> superseded (True) or refused (False)
SUPERSEDE = [
    (T.STOP, False, op(T.START, started=False), True),
    (T.STOP, False, op(T.START, started=True), True),
    (T.STOP, True, op(T.STOP), True),
    (T.RESTART, True, op(T.STOP), True),
    (T.STOP, True, op(T.RESTART), True),
    (T.RESTART, True, op(T.RESTART), True),
    (T.STOP, False, op(T.STOP), False),
    (T.STOP, True, op(T.STOP, force=True), False),
    (T.RESTART, False, op(T.RESTART), False),
    (T.STOP, False, op(T.MIGRATE), True),
    (T.RESTART, False, op(T.EVICT), True),
    (T.START, False, op(T.STOP), False),
    (T.START, False, op(T.START), False),
    (T.MIGRATE, False, op(T.STOP), False),
    (T.STOP, True, op(T.RESTORE), False),
    (T.RESTORE, False, op(T.START), False),
    (T.RESTORE, False, op(T.MIGRATE), False),
]


@pytest.mark.parametrize(("kind", "force", "active", "supersedes"), SUPERSEDE)
def test_one_active_operation_and_the_supersede_rules(
    kind: T, force: bool, active: ActiveOperation, supersedes: bool
) -> None:
    phase = V.STOPPED if kind is T.START else V.RUNNING
    admission = admit(kind, force, P.MANUAL, phase, [active])
    if supersedes:
        assert admission.allowed and admission.supersede == (active.name,)
    else:
        assert not admission.allowed
        assert admission.reason == "OperationInProgress"
        assert active.name in admission.message


def test_a_held_vm_takes_only_restore() -> None:
    assert admit(T.STOP, True, P.MANUAL, V.RUNNING, [], held=True).reason == "VMInMaintenance"
    assert admit(T.RESTORE, False, P.MANUAL, V.STOPPED, [], held=True).allowed
