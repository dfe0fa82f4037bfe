"""The state vocabulary (``domain.phases``): how each set differs from its neighbours, and that
nothing else in the code spells out a set of states or phases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import virtplane
from virtplane.domain import phases
from virtplane.domain.phases import DomainState as D
from virtplane.domain.resources import VMPhase as V

# (the set, its neighbour, what the set has beyond it, what it lacks): the "why it differs" of
# each docstring in domain/phases.py, as data.
DIFFERENCES = [
    (phases.UP_STATES, phases.IN_FLIGHT_STATES, {D.RUNNING, D.PAUSED}, set()),
    (phases.LIVE_STATES, phases.UP_STATES, {D.STARTING}, set()),
    (phases.ACTIVE_STATES, phases.LIVE_STATES, {D.SHUTTING_DOWN}, set()),
    (phases.RESIDENT_STATES, phases.ACTIVE_STATES, set(), {D.INCOMING}),
    (phases.LIVE_PHASES, phases.ALLOCATED_PHASES, set(), {V.PENDING}),
    (phases.UP_PHASES, phases.LIVE_PHASES, set(), {V.STOPPING}),
    (phases.RESTORE_RUNNING_PHASES, phases.UP_PHASES, {V.PENDING}, set()),
    (phases.TRANSITION_PHASES, phases.LIVE_PHASES, set(), {V.RUNNING, V.PAUSED, V.DEGRADED}),
    (phases.MIGRATABLE_PHASES, phases.UP_PHASES, set(), {V.STARTING, V.MIGRATING}),
    (phases.ALLOCATED_PHASES, phases.PLACED_PHASES, set(), {V.STOPPED}),
]


@pytest.mark.parametrize(("named", "neighbour", "more", "fewer"), DIFFERENCES)
def test_each_set_differs_from_its_neighbour_only_as_documented(
    named: frozenset[object], neighbour: frozenset[object], more: set[object], fewer: set[object]
) -> None:
    assert set(named - neighbour) == more
    assert set(neighbour - named) == fewer


def test_a_domain_that_is_off_is_in_no_set() -> None:
    for off in (D.SHUTOFF, D.CRASHED):
        assert off not in phases.ACTIVE_STATES


# Where a set of states or phases may still be written out, and why.
ALLOWED = {
    "domain/phases.py": "the one vocabulary",
    "domain/operations.py": "the applicability table of DESIGN.md §4 lists phases per operation",
    "drivers/": "a driver models its own hypervisor (e.g. which domains hold the sim's memory)",
}
ENUMS = {"VMPhase", "DomainState"}


def _spelled_out_sets(source: str) -> list[str]:
    """Literal sets, tuples and lists of two or more enum members of ``ENUMS``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Set | ast.Tuple | ast.List) or len(node.elts) < 2:
            continue
        if all(
            isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ENUMS
            for e in node.elts
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_spells_out_its_own_set_of_states_or_phases() -> None:
    root = Path(virtplane.__file__).parent
    offenders = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if any(relative.startswith(allowed) for allowed in ALLOWED):
            continue
        found = _spelled_out_sets(path.read_text())
        if found:
            offenders[relative] = found
    assert offenders == {}, "name the set once in domain/phases.py and import it"


def test_the_scan_finds_a_set_written_out() -> None:
    assert _spelled_out_sets("x = frozenset({VMPhase.RUNNING, VMPhase.PAUSED})\n")
    assert _spelled_out_sets("ok = state in (DomainState.RUNNING, DomainState.PAUSED)\n")
    assert not _spelled_out_sets("ok = phase in (VMPhase.RUNNING,)\n")
