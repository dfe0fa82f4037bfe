"""A controller declared once, as a value, beside its reconciler (as controller-runtime's builder):
the kind it reconciles, how its reconciler is built, which changes wake it, and how many keys it
works on at once, with the measurement that chose the number.

``controllers.installed`` lists every registration in the order the control plane looks at
everything once on start; ``bootstrap`` is a loop over that list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from virtplane.controllers.context import ControllerContext
    from virtplane.controllers.migration import MigrationCoordinator
    from virtplane.controllers.operations import OperationHandler
    from virtplane.controllers.watch import Watch
    from virtplane.domain.resources import OperationType
    from virtplane.fencing.base import BmcFactory
    from virtplane.reconcile import Reconciler

__all__ = ["MIGRATION_KIND", "HandlerRegistration", "Parts", "Registration"]

MIGRATION_KIND = "Migration"
"""The migration follower's keys are VM names, under this kind of its own (no stored kind). Named
here, where the VM controller's migration step reaches it without importing the migration
package, which imports the VM controller."""


@dataclass(frozen=True)
class HandlerRegistration:
    """Operation types that the operation controller hands to a handler another controller owns."""

    types: tuple[OperationType, ...]
    handler: Callable[[Parts], OperationHandler]
    watches: Sequence[Watch] = ()
    """Changes that wake the operation controller for these types (e.g. a migration slot freed)."""


@dataclass(frozen=True)
class Parts:
    """What the reconcilers are built from: the context, and what several of them share."""

    ctx: ControllerContext
    migrations: MigrationCoordinator
    """The one migration coordinator: its slots and locks are shared by every mover."""
    bmc_factory: BmcFactory
    operation_handlers: Sequence[HandlerRegistration] = ()
    console_dir: str | None = None


@dataclass(frozen=True)
class Registration:
    kind: str
    reconciler: Callable[[Parts], Reconciler]
    watches: Sequence[Watch]
    workers: int | None = None
    """Keys reconciled at once; None: ``ControlPlaneOptions.workers``. Say why a number is what it is."""
    looked_at_on_start: bool = True
    """Every key of the kind is looked at once when the controllers start (level-triggered start)."""
