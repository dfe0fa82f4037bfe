"""The controller runtime: level-triggered reconcilers over a deduplicating, rate-limited work queue."""

from virtplane.reconcile.clock import Clock, FakeClock, MonotonicClock, ObservableClock
from virtplane.reconcile.controller import (
    Controller,
    ControllerMetrics,
    Outcome,
    QueueAction,
    ReconcileTimeout,
    Verdict,
    decide,
)
from virtplane.reconcile.queue import Priority, QueueShutDown, WorkQueue
from virtplane.reconcile.ratelimit import ItemBackoff
from virtplane.reconcile.sources import resync_slices, resync_ticker
from virtplane.reconcile.types import Reconciler, Request, Result, TerminalError

__all__ = [
    "Clock",
    "Controller",
    "ControllerMetrics",
    "FakeClock",
    "ItemBackoff",
    "MonotonicClock",
    "ObservableClock",
    "Outcome",
    "Priority",
    "QueueAction",
    "QueueShutDown",
    "ReconcileTimeout",
    "Reconciler",
    "Request",
    "Result",
    "TerminalError",
    "Verdict",
    "WorkQueue",
    "decide",
    "resync_slices",
    "resync_ticker",
]
