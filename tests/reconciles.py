"""Wait for a reconcile known to have seen a change, instead of sleeping and hoping.

``ReconcileLog`` wraps every reconciler of a control plane (through
``ControlPlaneOptions.wrap_reconciler``) and numbers each reconcile as it starts.
``await reconciled(plane, name)`` brings the controllers' cache up to the store (what the
test wrote straight to the store included: controllers read the cache), enqueues the key
and returns once a reconcile of it that *started after the call* has finished. That
reconcile read what the test wrote and asked the drivers after everything the test did
before the call, so a check made after it sees the controller's answer to the change,
however slow the machine is.
A fixed sleep only hopes for that.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from typing import TYPE_CHECKING

from tests.conftest import eventually
from virtplane.reconcile import Outcome, Reconciler, Request, Result

if TYPE_CHECKING:
    from virtplane.bootstrap import ControlPlane

_LOGS: weakref.WeakKeyDictionary[ControlPlane, ReconcileLog] = weakref.WeakKeyDictionary()


class ReconcileLog:
    """Every finished reconcile of one control plane: (kind, name) → [(start number, outcome)]."""

    def __init__(self) -> None:
        self.started = 0
        self.finished: dict[tuple[str, str], list[tuple[int, Outcome]]] = defaultdict(list)

    def wrap(self, kind: str, reconciler: Reconciler) -> Reconciler:
        async def reconcile(request: Request) -> Result | None:
            self.started += 1
            number = self.started
            try:
                result = await reconciler(request)
            except BaseException as exc:
                self.finished[(kind, request.name)].append((number, exc))
                raise
            self.finished[(kind, request.name)].append((number, result))
            return result

        return reconcile

    def attach(self, plane: ControlPlane) -> None:
        _LOGS[plane] = self

    async def seen(self, plane: ControlPlane, kind: str, name: str, timeout: float = 10.0) -> Outcome:
        """Reconcile ``kind/name`` once more; the outcome of the first reconcile started after this call."""
        await plane.feed.catch_up()  # the cache the reconcile reads holds what the test wrote
        after = self.started
        plane.enqueue(kind, name)

        def first_after() -> tuple[Outcome] | None:
            return next(
                ((outcome,) for number, outcome in self.finished[(kind, name)] if number > after), None
            )

        (outcome,) = await eventually(first_after, timeout=timeout, interval=0.005)
        return outcome


def reconcile_log(plane: ControlPlane) -> ReconcileLog:
    """The reconciles ``plane`` recorded (built with make_plane)."""
    log = _LOGS.get(plane)
    assert log is not None, "this control plane records no reconciles: build it with make_plane"
    return log


async def reconciled(
    plane: ControlPlane, name: str, kind: str = "VirtualMachine", timeout: float = 10.0
) -> Outcome:
    """Wait for a reconcile of ``kind/name`` that started after this call (see the module docstring)."""
    log = _LOGS.get(plane)
    assert log is not None, "this control plane records no reconciles: build it with make_plane"
    return await log.seen(plane, kind, name, timeout)
