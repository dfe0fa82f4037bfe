"""Runs a reconciler over a work queue with a pool of asyncio workers.

The verdict of each reconcile maps to queue calls through ``decide``, a pure
function (the table lives in its docstring and in the tests):

=========================  ======  ====================  ==============
outcome                    forget  requeue               result label
=========================  ======  ====================  ==============
``None`` / ``Result()``    yes     no                    success
``Result(requeue_after)``  yes     ``add_after(delay)``  requeue_after
``TerminalError``          yes     no                    terminal
``ReconcileTimeout``       no      ``add_rate_limited``  timeout
any other exception        no      ``add_rate_limited``  error
=========================  ======  ====================  ==============

In every case the key is marked ``done`` afterwards, so an add that arrived
during the reconcile is requeued then.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias, assert_never

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from virtplane.reconcile.clock import Clock, MonotonicClock
from virtplane.reconcile.queue import Priority, QueueShutDown, WorkQueue
from virtplane.reconcile.ratelimit import ItemBackoff
from virtplane.reconcile.types import Reconciler, Request, Result, TerminalError

logger = logging.getLogger("virtplane.reconcile")

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ReconcileTimeout(Exception):
    """The reconcile ran longer than the controller's ``timeout_s`` and was cancelled."""


class Verdict(StrEnum):
    SUCCESS = "success"
    REQUEUE_AFTER = "requeue_after"
    TERMINAL = "terminal"
    TIMEOUT = "timeout"
    ERROR = "error"


# verdicts logged only at DEBUG: their log fields are not built unless someone reads them
_QUIET = frozenset({Verdict.SUCCESS, Verdict.REQUEUE_AFTER})


@dataclass(frozen=True)
class QueueAction:
    """What to do with a key after its reconcile, besides the unconditional ``done``."""

    verdict: Verdict
    forget: bool
    requeue_after: float | None = None
    rate_limited: bool = False


# What a reconcile produced: its return value, or the exception it raised.
Outcome: TypeAlias = Result | BaseException | None


def decide(outcome: Outcome) -> QueueAction:
    """Map a reconcile outcome to queue calls (see the module docstring's table)."""
    if isinstance(outcome, TerminalError):
        return QueueAction(Verdict.TERMINAL, forget=True)
    if isinstance(outcome, ReconcileTimeout):
        return QueueAction(Verdict.TIMEOUT, forget=False, rate_limited=True)
    if isinstance(outcome, BaseException):
        return QueueAction(Verdict.ERROR, forget=False, rate_limited=True)
    if outcome is None or outcome.requeue_after is None:
        return QueueAction(Verdict.SUCCESS, forget=True)
    return QueueAction(Verdict.REQUEUE_AFTER, forget=True, requeue_after=outcome.requeue_after)


class ControllerMetrics:
    """Prometheus metrics for any number of controllers, registered on one given registry.

    Create one per registry and share it: registering the same names twice fails.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reconcile_total = Counter(
            "reconcile_total",
            "Reconciles finished, by controller and result.",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_duration_seconds = Histogram(
            "reconcile_duration_seconds",
            "Time spent in one reconcile.",
            ["controller"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth",
            "Distinct keys waiting in the controller's work queue.",
            ["controller"],
            registry=registry,
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries_total",
            "Keys requeued with backoff after a failed reconcile.",
            ["controller"],
            registry=registry,
        )


class Controller:
    """Level-triggered: keys go in through ``enqueue``; ``run`` reconciles them until ``stop``."""

    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 4,
        clock: Clock | None = None,
        backoff: ItemBackoff | None = None,
        timeout_s: float | None = 60.0,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a controller needs at least one worker, got {workers}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s!r}")
        self.name = name
        self._reconcile = reconcile
        self._workers = workers
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._timeout_s = timeout_s
        self.queue: WorkQueue[Request] = WorkQueue(clock=self._clock, backoff=backoff)
        self._metrics = metrics if metrics is not None else ControllerMetrics(CollectorRegistry())
        self._metrics.workqueue_depth.labels(controller=name).set_function(lambda: len(self.queue))
        # the labelled series, looked up once (``labels`` takes a lock and builds a key per call);
        # made now, they also export zeros, so rates exist before the first event of each kind
        self._reconciled = {
            verdict: self._metrics.reconcile_total.labels(controller=name, result=verdict.value)
            for verdict in Verdict
        }
        self._retried = self._metrics.workqueue_retries_total.labels(controller=name)
        self._duration = self._metrics.reconcile_duration_seconds.labels(controller=name)
        self._started = False
        self._finished = asyncio.Event()
        self._worker_tasks: set[asyncio.Task[None]] = set()

    def enqueue(self, req: Request, delay: float = 0.0, priority: Priority = Priority.EVENT) -> None:
        if delay > 0:
            self.queue.add_after(req, delay, priority)
        else:
            self.queue.add(req, priority)

    def enqueue_resync(self, req: Request) -> None:
        """Look at ``req`` again though nothing is known to have changed: after event-woken keys."""
        self.queue.add(req, Priority.RESYNC)

    async def run(self) -> None:
        """Run the workers until ``stop`` (or until this task is cancelled). Runs once."""
        if self._started:
            raise RuntimeError(f"controller {self.name!r} has already run")
        self._started = True
        logger.info("controller %s starting %d workers", self.name, self._workers, extra=self._fields())
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(self._workers):
                    task = group.create_task(self._work(), name=f"{self.name}-worker-{index}")
                    self._worker_tasks.add(task)
        except Exception:  # a worker broke outside any reconcile: nobody awaits this task to see it
            logger.exception("controller %s failed; its keys are no longer reconciled", self.name)
            raise
        finally:
            self.queue.shutdown()
            self._finished.set()
            logger.info("controller %s stopped", self.name, extra=self._fields())

    async def stop(self) -> None:
        """Stop handing out keys and wait for reconciles in flight to finish."""
        self.queue.shutdown()
        # Called from a reconcile, waiting would wait for ourselves.
        if self._started and asyncio.current_task() not in self._worker_tasks:
            await self._finished.wait()

    async def _work(self) -> None:
        while True:
            try:
                req = await self.queue.get()
            except QueueShutDown:
                return
            try:
                await self._process(req)
            finally:
                self.queue.done(req)
            # A reconcile that never awaits must not starve the rest of the event loop.
            await asyncio.sleep(0)

    async def _process(self, req: Request) -> None:
        started_at = self._clock.now()
        outcome = await self._call(req)
        elapsed = self._clock.now() - started_at
        action = decide(outcome)
        if action.forget:
            self.queue.forget(req)
        if action.requeue_after is not None:
            self.queue.add_after(req, action.requeue_after)
        if action.rate_limited:
            self.queue.add_rate_limited(req)
            self._retried.inc()
        self._reconciled[action.verdict].inc()
        self._duration.observe(elapsed)
        if action.verdict not in _QUIET or logger.isEnabledFor(logging.DEBUG):
            self._log(req, action, outcome, elapsed)

    async def _call(self, req: Request) -> Outcome:
        """Run one reconcile and capture its result or exception; never raises but for our own cancellation."""
        deadline = asyncio.timeout(self._timeout_s)
        try:
            async with deadline:
                result = await self._reconcile(req)
        except TimeoutError as exc:
            if deadline.expired():
                return ReconcileTimeout(f"reconcile of {req} exceeded {self._timeout_s} s")
            return exc
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            return exc  # a cancellation from inside the reconcile, not a stop: a plain failure
        except Exception as exc:
            return exc
        if result is not None and not isinstance(result, Result):
            return TypeError(f"reconciler returned {type(result).__name__}, expected Result or None")
        return result

    def _log(self, req: Request, action: QueueAction, outcome: Outcome, elapsed: float) -> None:
        fields = self._fields(req, action.verdict, elapsed)
        match action.verdict:
            case Verdict.SUCCESS:
                logger.debug("reconciled %s", req, extra=fields)
            case Verdict.REQUEUE_AFTER:
                logger.debug("reconciled %s; again in %s s", req, action.requeue_after, extra=fields)
            case Verdict.TERMINAL:
                logger.error(
                    "reconcile of %s failed terminally; not retrying",
                    req,
                    exc_info=_exc(outcome),
                    extra=fields,
                )
            case Verdict.TIMEOUT | Verdict.ERROR:
                fields["failures"] = self.queue.num_requeues(req)
                fields["retry_at"] = self.queue.ready_at(req)
                logger.error(
                    "reconcile of %s failed (%s); retrying with backoff",
                    req,
                    action.verdict.value,
                    exc_info=_exc(outcome),
                    extra=fields,
                )
            case _:
                assert_never(action.verdict)

    def _fields(
        self, req: Request | None = None, verdict: Verdict | None = None, elapsed: float | None = None
    ) -> dict[str, object]:
        # LogRecord reserves "name", hence the request_ prefix.
        fields: dict[str, object] = {"controller": self.name}
        if req is not None:
            fields["request_kind"] = req.kind
            fields["request_name"] = req.name
        if verdict is not None:
            fields["result"] = verdict.value
        if elapsed is not None:
            fields["duration_s"] = elapsed
        return fields


def _exc(outcome: Outcome) -> BaseException | None:
    return outcome if isinstance(outcome, BaseException) else None


__all__ = [
    "Controller",
    "ControllerMetrics",
    "Outcome",
    "QueueAction",
    "ReconcileTimeout",
    "Verdict",
    "decide",
]
