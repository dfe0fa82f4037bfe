"""The vocabulary in one place (``domain/vocabulary.py``): every list an edge shows (the CLI's
choices, the settings, the dashboard, the OpenAPI document) is the enum's members, nothing
else writes the members out, and every ladder over an enum ends in ``assert_never`` so that
mypy names each one a new member misses."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args, get_type_hints

import httpx
import pytest

import virtplane
from tests.conftest import LiveServer
from virtplane.cli import hosts, tokens, vms
from virtplane.domain import vocabulary
from virtplane.domain.operations import APPLICABLE
from virtplane.domain.phases import LIVE_PHASES
from virtplane.domain.resources import HostResourceState, OperationPhase, OperationType, VMPhase
from virtplane.domain.settings import REGISTRY
from virtplane.domain.vocabulary import (
    HOST_FAULTS,
    FaultKind,
    KvmBroken,
    MaintenanceStrategy,
    RestoreMode,
    Role,
    RunPolicy,
)
from virtplane.web import STATIC_DIR, VOCABULARY_JS

SRC = Path(virtplane.__file__).parent
VOCABULARY: list[type[StrEnum]] = [
    e
    for e in vars(vocabulary).values()
    if isinstance(e, type) and issubclass(e, StrEnum) and e is not StrEnum
]


def values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


# --------------------------------------------------------------------------- each edge's list


@pytest.mark.parametrize(
    ("command", "parameter", "enum"),
    [
        (hosts.maintenance_enable, "strategy", MaintenanceStrategy),
        (tokens.token_create, "role", Role),
        (vms.restore, "mode", RestoreMode),
    ],
)
def test_the_cli_offers_the_members(
    command: Callable[..., None], parameter: str, enum: type[StrEnum]
) -> None:
    """Typer offers an enum parameter's members as its choices: the parameter is the enum itself."""
    annotated = get_type_hints(command, include_extras=True)[parameter]
    assert enum in (*get_args(get_args(annotated)[0]), get_args(annotated)[0])


def test_the_cli_takes_every_fault_kind() -> None:
    assert [hosts._fault_target([kind])[1] for kind in values(FaultKind)] == list(FaultKind)


@pytest.mark.parametrize(
    ("key", "enum"),
    [
        ("host.maintenance.local.storage.strategy", MaintenanceStrategy),
        ("host.accelerator.kvm_broken", KvmBroken),
    ],
)
def test_a_setting_allows_the_members(key: str, enum: type[StrEnum]) -> None:
    assert list(REGISTRY[key].allowed or ()) == values(enum)
    assert REGISTRY[key].default in values(enum)


def _exported(module: str) -> dict[str, Any]:
    return {
        name: json.loads(value) for name, value in re.findall(r"^export const (\w+) = (.*);$", module, re.M)
    }


def test_the_dashboard_gets_its_lists_from_the_enums(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        served = client.get("/ui/static/vocabulary.js")
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/javascript")
    exported = _exported(served.text)
    assert exported["RUN_POLICIES"] == values(RunPolicy)
    assert exported["DEFAULT_RUN_POLICY"] == RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
    assert [value for value, _ in exported["STRATEGIES"]] == values(MaintenanceStrategy)
    assert exported["OPERATION_PHASES"]["Stop"] == sorted(
        p.value for p in APPLICABLE[OperationType.STOP].phases
    )
    assert exported["CONSOLE_PHASES"] == sorted(p.value for p in LIVE_PHASES)
    assert exported == _exported(VOCABULARY_JS)


def test_the_openapi_document_lists_the_members(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for enum in (RunPolicy, MaintenanceStrategy, RestoreMode):
        assert schemas[enum.__name__]["enum"] == values(enum)
    assert schemas["FaultRequest"]["properties"]["kind"]["enum"] == values(FaultKind)
    vm_faults = schemas["VMFaultRequest"]["properties"]["kind"]["enum"]
    assert vm_faults == [kind.value for kind in FaultKind if kind not in HOST_FAULTS]


# --------------------------------------------------------------------------- nobody else spells them


def _members_of(strings: list[str], enums: list[type[StrEnum]] | None = None) -> type[StrEnum] | None:
    """The vocabulary enum (or one of ``enums``) that two or more ``strings`` are all members of."""
    if len(strings) < 2:
        return None
    return next((e for e in enums or VOCABULARY if set(strings) <= set(values(e))), None)


def copies_in_python(source: str) -> list[str]:
    """Literal tuples, lists and sets of two or more members' values, and classes whose string
    constants are two or more members' values (an enum of one's own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        strings: list[str] = []
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                strings = [e.value for e in node.elts]  # type: ignore[attr-defined]
        elif isinstance(node, ast.ClassDef):
            strings = [
                s.value.value
                for s in node.body
                if isinstance(s, ast.Assign)
                and isinstance(s.value, ast.Constant)
                and isinstance(s.value.value, str)
            ]
        enum = _members_of(strings)
        if enum is not None:
            found.append(f"line {node.lineno}: {enum.__name__} {strings}")
    return found


STATES: list[type[StrEnum]] = [VMPhase, HostResourceState, OperationPhase]
"""Whose sets the dashboard's rules take from the server's tables (vocabulary.js), never spells."""


def copies_in_javascript(source: str) -> list[str]:
    """Array literals (no nested brackets) whose strings are two or more members' values, of the
    vocabulary or of the phases and host states."""
    found = []
    for array in re.findall(r"\[[^\[\]]*\]", source):
        enum = _members_of(re.findall(r'"([^"\\]*)"', array), [*VOCABULARY, *STATES])
        if enum is not None:
            found.append(f"{enum.__name__} {array}")
    return found


def test_no_module_writes_out_the_vocabulary() -> None:
    offenders: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path != Path(vocabulary.__file__):
            offenders[path.relative_to(SRC).as_posix()] = copies_in_python(path.read_text())
    for path in sorted(STATIC_DIR.glob("*.js")):
        offenders[f"web/static/{path.name}"] = copies_in_javascript(path.read_text())
    assert {path: found for path, found in offenders.items() if found} == {}, (
        "derive the list from the enum in domain/vocabulary.py"
    )


def test_the_scan_finds_a_copy() -> None:
    assert copies_in_python('allowed = ("Error", "Migration")\n')
    assert copies_in_python('class Strategy(StrEnum):\n    ERROR = "Error"\n    STOP = "Stop"\n')
    assert copies_in_javascript('const POLICIES = ["AlwaysOn", "Manual"];')
    assert copies_in_javascript('const STOPPABLE = new Set(["Running", "Degraded"]);')
    assert not copies_in_python('x = ("Error", "elsewhere")\n')


# --------------------------------------------------------------------------- ladders end in assert_never


def _member(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.isupper()


def _compared(test: ast.expr) -> str | None:
    """``x`` of ``x is E.M``, ``x == E.M`` or ``x in (E.A, E.B)``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    right = test.comparators[0]
    if isinstance(test.ops[0], ast.Is | ast.Eq) and _member(right):
        return ast.unparse(test.left)
    if (
        isinstance(test.ops[0], ast.In)
        and isinstance(right, ast.Tuple | ast.Set)
        and all(map(_member, right.elts))
    ):
        return ast.unparse(test.left)
    return None


def _asserts_never(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and ast.unparse(s.value.func) == "assert_never"
        for s in body
    )


def open_ladders(source: str) -> list[str]:
    """A ``match`` whose last case is not ``case _: assert_never(...)``; an if/elif chain of
    three or more tests of one value against enum members (write it as a ``match``)."""
    found = []
    elifs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Match):
            last = node.cases[-1]
            wildcard = isinstance(last.pattern, ast.MatchAs) and last.pattern.pattern is None
            if not (wildcard and _asserts_never(last.body)):
                found.append(
                    f"line {node.lineno}: match {ast.unparse(node.subject)} ends without assert_never"
                )
        elif isinstance(node, ast.If) and id(node) not in elifs:
            chain = [node]
            while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
                chain.append(chain[-1].orelse[0])  # type: ignore[arg-type]
                elifs.add(id(chain[-1]))
            subjects = {_compared(branch.test) for branch in chain}
            if len(chain) >= 3 and len(subjects) == 1 and None not in subjects:
                found.append(f"line {node.lineno}: if/elif over {subjects.pop()}: write it as a match")
    return found


def test_every_ladder_over_an_enum_ends_in_assert_never() -> None:
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        found = open_ladders(path.read_text())
        if found:
            offenders[path.relative_to(SRC).as_posix()] = found
    assert offenders == {}


def test_the_scan_finds_an_open_ladder() -> None:
    assert open_ladders("match s:\n    case S.A:\n        pass\n    case _:\n        pass\n")
    assert open_ladders("if s is S.A:\n    a()\nelif s is S.B:\n    b()\nelse:\n    c()\n") == []
    assert open_ladders("if s is S.A:\n    a()\nelif s is S.B:\n    b()\nelif s in (S.C, S.D):\n    c()\n")
    assert not open_ladders("match s:\n    case S.A:\n        pass\n    case _:\n        assert_never(s)\n")
