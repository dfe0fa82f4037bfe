"""A controller is declared once, as a value beside its reconciler (``controllers.registration``);
the control plane runs exactly the registrations ``controllers.installed`` lists, and nothing
wakes a controller by a kind spelled as a string."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import virtplane
import virtplane.controllers
from tests.conftest import make_plane
from virtplane.controllers.installed import CONTROLLERS, OPERATION_HANDLERS
from virtplane.controllers.registration import HandlerRegistration, Registration
from virtplane.store.store import Store


def _declared() -> tuple[list[Registration], list[HandlerRegistration]]:
    """Every registration a module of ``virtplane.controllers`` holds at its top level."""
    controllers: list[Registration] = []
    handlers: list[HandlerRegistration] = []
    package = virtplane.controllers
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, Registration) and value not in controllers:
                controllers.append(value)
            elif isinstance(value, HandlerRegistration) and value not in handlers:
                handlers.append(value)
    return controllers, handlers


def test_every_registration_declared_is_installed_once() -> None:
    controllers, handlers = _declared()
    assert sorted(r.kind for r in controllers) == sorted(r.kind for r in CONTROLLERS)
    assert all(any(r is c for c in CONTROLLERS) for r in controllers)
    assert len({r.kind for r in CONTROLLERS}) == len(CONTROLLERS), "one registration a kind"
    assert [h for h in handlers if not any(h is i for i in OPERATION_HANDLERS)] == []
    handled = [t for h in OPERATION_HANDLERS for t in h.types]
    assert len(set(handled)) == len(handled), "one handler an operation type"


def test_the_plane_runs_the_registrations_with_their_watches(store: Store) -> None:
    plane = make_plane(store)
    plane._build_controllers()
    assert list(plane.controllers) == [r.kind for r in CONTROLLERS]
    expected = [w for r in CONTROLLERS for w in r.watches] + [
        w for h in OPERATION_HANDLERS for w in h.watches
    ]
    assert plane.watches == expected


def string_kinds_woken(source: str) -> list[str]:
    """``….enqueue("Kind", …)``: a kind spelled as a string where a declared value exists."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "enqueue"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def test_no_controller_is_woken_by_a_kind_spelled_out() -> None:
    root = Path(virtplane.__file__).parent
    offenders = {
        path.relative_to(root).as_posix(): found
        for path in sorted(root.rglob("*.py"))
        if (found := string_kinds_woken(path.read_text()))
    }
    assert offenders == {}
    assert string_kinds_woken('state.ctx.enqueue("Migration", state.name)\n')
