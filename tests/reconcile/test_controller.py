import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from virtplane.reconcile.clock import FakeClock
from virtplane.reconcile.controller import (
    Controller,
    ControllerMetrics,
    Outcome,
    QueueAction,
    ReconcileTimeout,
    Verdict,
    decide,
)
from virtplane.reconcile.ratelimit import ItemBackoff
from virtplane.reconcile.types import Request, Result, TerminalError

VM_A = Request("vm", "a")
VM_B = Request("vm", "b")


async def until(condition: Callable[[], bool], what: str = "condition") -> None:
    """Yield to the loop until ``condition`` holds; the real-time cap only guards against hangs."""
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"gave up waiting for {what}")


@asynccontextmanager
async def running(controller: Controller) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(controller.run())
    try:
        yield task
    finally:
        await controller.stop()
        await task


class ScriptedReconciler:
    """Plays back one scripted outcome per call (the last one repeats) and records the calls."""

    def __init__(self, *script: Result | BaseException | None) -> None:
        self.script = list(script)
        self.calls: list[Request] = []

    async def __call__(self, req: Request) -> Result | None:
        self.calls.append(req)
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def idle(controller: Controller, req: Request) -> Callable[[], bool]:
    return lambda: not controller.queue.is_processing(req)


# --- the dispatch table ---

_boom = RuntimeError("boom")


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (None, QueueAction(Verdict.SUCCESS, forget=True)),
        (Result(), QueueAction(Verdict.SUCCESS, forget=True)),
        (Result(requeue_after=30.0), QueueAction(Verdict.REQUEUE_AFTER, forget=True, requeue_after=30.0)),
        (Result(requeue_after=0.0), QueueAction(Verdict.REQUEUE_AFTER, forget=True, requeue_after=0.0)),
        (TerminalError("bad spec"), QueueAction(Verdict.TERMINAL, forget=True)),
        (ReconcileTimeout("slow"), QueueAction(Verdict.TIMEOUT, forget=False, rate_limited=True)),
        (_boom, QueueAction(Verdict.ERROR, forget=False, rate_limited=True)),
        (TimeoutError("the reconciler's own"), QueueAction(Verdict.ERROR, forget=False, rate_limited=True)),
        (asyncio.CancelledError(), QueueAction(Verdict.ERROR, forget=False, rate_limited=True)),
    ],
)
def test_dispatch_table(outcome: Outcome, expected: QueueAction) -> None:
    assert decide(outcome) == expected


# --- end to end ---


async def test_success_forgets_and_leaves_the_key_out() -> None:
    registry = CollectorRegistry()
    reconciler = ScriptedReconciler(None)
    controller = Controller("vm", reconciler, clock=FakeClock(), metrics=ControllerMetrics(registry))
    controller.queue.backoff.when(VM_A)  # an earlier failure, to be forgotten
    async with running(controller):
        controller.enqueue(VM_A)
        await until(lambda: reconciler.calls == [VM_A] and idle(controller, VM_A)(), "the reconcile")
        assert len(controller.queue) == 0
        assert controller.queue.num_requeues(VM_A) == 0
    assert sample(registry, "reconcile_total", controller="vm", result="success") == 1.0
    assert sample(registry, "reconcile_duration_seconds_count", controller="vm") == 1.0


async def test_requeue_after_comes_back_after_the_delay_without_backoff() -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(Result(requeue_after=30.0), None)
    controller = Controller("vm", reconciler, clock=clock)
    async with running(controller):
        controller.enqueue(VM_A)
        await until(lambda: len(reconciler.calls) == 1 and idle(controller, VM_A)())
        assert controller.queue.ready_at(VM_A) == 30.0
        assert controller.queue.num_requeues(VM_A) == 0
        clock.advance(29.0)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(reconciler.calls) == 1
        clock.advance(1.0)
        await until(lambda: len(reconciler.calls) == 2 and idle(controller, VM_A)())
        assert VM_A not in controller.queue


async def test_failures_back_off_exponentially_until_a_success_forgets() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    boom = RuntimeError("libvirt went away")
    reconciler = ScriptedReconciler(boom, boom, boom, boom, None)
    controller = Controller(
        "vm",
        reconciler,
        clock=clock,
        backoff=ItemBackoff(base=1.0, cap=4.0),
        metrics=ControllerMetrics(registry),
    )
    async with running(controller):
        controller.enqueue(VM_A)

        def settled_after(calls: int) -> Callable[[], bool]:
            return lambda: len(reconciler.calls) == calls and idle(controller, VM_A)()

        delays = []
        for attempt in range(1, 5):
            await until(settled_after(attempt))
            ready_at = controller.queue.ready_at(VM_A)
            assert ready_at is not None
            delays.append(ready_at - clock.now())
            clock.advance(delays[-1])
        await until(lambda: len(reconciler.calls) == 5 and idle(controller, VM_A)())
        assert delays == [1.0, 2.0, 4.0, 4.0]
        assert controller.queue.num_requeues(VM_A) == 0
        assert VM_A not in controller.queue
    assert sample(registry, "workqueue_retries_total", controller="vm") == 4.0
    assert sample(registry, "reconcile_total", controller="vm", result="error") == 4.0
    assert sample(registry, "reconcile_total", controller="vm", result="success") == 1.0


async def test_terminal_error_is_logged_forgotten_and_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    reconciler = ScriptedReconciler(RuntimeError("flaky"), TerminalError("unsupported firmware"))
    controller = Controller("vm", reconciler, clock=clock, backoff=ItemBackoff(base=1.0, cap=10.0))
    with caplog.at_level(logging.ERROR, logger="virtplane.reconcile"):
        async with running(controller):
            controller.enqueue(VM_A)
            await until(lambda: len(reconciler.calls) == 1 and idle(controller, VM_A)())
            assert controller.queue.num_requeues(VM_A) == 1
            clock.advance(1.0)
            await until(lambda: len(reconciler.calls) == 2 and idle(controller, VM_A)())
            assert controller.queue.num_requeues(VM_A) == 0
            assert VM_A not in controller.queue
    terminal = [r for r in caplog.records if getattr(r, "result", None) == "terminal"]
    assert len(terminal) == 1
    record = terminal[0]
    assert record.name == "virtplane.reconcile"
    assert (record.controller, record.request_kind, record.request_name) == ("vm", "vm", "a")  # type: ignore[attr-defined]
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], TerminalError)


@pytest.mark.parametrize("level", [logging.ERROR, logging.DEBUG])
async def test_failures_are_logged_at_error_and_successes_only_when_debug_is_on(
    caplog: pytest.LogCaptureFixture, level: int
) -> None:
    """A success's log fields are built only when DEBUG is on; a failure is logged whatever the level."""
    clock = FakeClock()
    reconciler = ScriptedReconciler(RuntimeError("flaky"), Result(requeue_after=5.0), None)
    controller = Controller("vm", reconciler, clock=clock, backoff=ItemBackoff(base=1.0, cap=10.0))
    with caplog.at_level(level, logger="virtplane.reconcile"):
        async with running(controller):
            controller.enqueue(VM_A)
            await until(lambda: len(reconciler.calls) == 1 and idle(controller, VM_A)())
            clock.advance(1.0)
            await until(lambda: len(reconciler.calls) == 2 and idle(controller, VM_A)())
            clock.advance(5.0)
            await until(lambda: len(reconciler.calls) == 3 and idle(controller, VM_A)())
    logged = [(r.levelno, getattr(r, "result", None)) for r in caplog.records if hasattr(r, "request_name")]
    expected = [(logging.ERROR, "error")]
    if level == logging.DEBUG:
        expected += [(logging.DEBUG, "requeue_after"), (logging.DEBUG, "success")]
    assert logged == expected


async def test_timeout_cancels_the_reconcile_and_retries_with_backoff() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    cancelled = asyncio.Event()
    calls: list[Request] = []

    async def hangs_first_time(req: Request) -> None:
        calls.append(req)
        if len(calls) == 1:
            try:
                await asyncio.Event().wait()
            finally:
                cancelled.set()

    controller = Controller(
        "vm",
        hangs_first_time,
        clock=clock,
        timeout_s=0.005,
        backoff=ItemBackoff(base=1.0, cap=10.0),
        metrics=ControllerMetrics(registry),
    )
    async with running(controller):
        controller.enqueue(VM_A)
        await until(lambda: len(calls) == 1 and idle(controller, VM_A)(), "the timeout")
        assert cancelled.is_set()
        assert controller.queue.num_requeues(VM_A) == 1
        assert controller.queue.ready_at(VM_A) == 1.0
        clock.advance(1.0)
        await until(lambda: len(calls) == 2 and idle(controller, VM_A)())
    assert sample(registry, "reconcile_total", controller="vm", result="timeout") == 1.0
    assert sample(registry, "reconcile_total", controller="vm", result="success") == 1.0


@pytest.mark.parametrize(
    "misbehaviour",
    [RuntimeError("boom"), asyncio.CancelledError(), "not a Result"],
    ids=["exception", "stray-cancellation", "wrong-return-type"],
)
async def test_a_misbehaving_reconcile_never_kills_its_worker(misbehaviour: object) -> None:
    calls: list[Request] = []

    async def reconcile(req: Request) -> Result | None:
        calls.append(req)
        if req == VM_A:
            if isinstance(misbehaviour, BaseException):
                raise misbehaviour
            return misbehaviour  # type: ignore[return-value]
        return None

    controller = Controller("vm", reconcile, workers=1, clock=FakeClock())
    async with running(controller) as run_task:
        controller.enqueue(VM_A)
        controller.enqueue(VM_B)
        await until(lambda: calls == [VM_A, VM_B] and idle(controller, VM_B)())
        assert controller.queue.num_requeues(VM_A) == 1
        assert VM_A in controller.queue
        assert not run_task.done()


async def test_a_worker_broken_outside_a_reconcile_is_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The controller's task is awaited only at the server's stop: without the log, a queue
    that broke its workers at start left a server that served and reconciled nothing."""

    async def reconcile(_: Request) -> Result | None:
        return None

    controller = Controller("vm", reconcile, workers=2, clock=FakeClock())

    async def broken_get() -> Request:
        raise RuntimeError("the queue broke")

    controller.queue.get = broken_get  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="virtplane.reconcile"), pytest.raises(ExceptionGroup):
        await controller.run()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "controller vm failed; its keys are no longer reconciled"
    assert record.exc_info is not None


async def test_no_key_is_ever_reconciled_by_two_workers_at_once() -> None:
    keys = [Request("vm", f"vm-{i}") for i in range(5)]
    rounds_per_key = 25
    in_flight: dict[Request, int] = dict.fromkeys(keys, 0)
    max_in_flight_per_key: dict[Request, int] = dict.fromkeys(keys, 0)
    max_in_flight_total = 0
    counts: dict[Request, int] = dict.fromkeys(keys, 0)
    controller: Controller

    async def instrumented(req: Request) -> Result | None:
        nonlocal max_in_flight_total
        in_flight[req] += 1
        max_in_flight_per_key[req] = max(max_in_flight_per_key[req], in_flight[req])
        max_in_flight_total = max(max_in_flight_total, sum(in_flight.values()))
        try:
            for index, other in enumerate(keys):  # events and resyncs keep arriving mid-reconcile
                if (index + counts[req]) % 2:
                    controller.enqueue_resync(other)
                else:
                    controller.enqueue(other)
                await asyncio.sleep(0)
            counts[req] += 1
            if counts[req] < rounds_per_key:
                controller.enqueue(req)
            return None
        finally:
            in_flight[req] -= 1

    controller = Controller("vm", instrumented, workers=8, clock=FakeClock())
    async with running(controller):
        for key in keys:
            controller.enqueue(key)
        await until(lambda: all(count >= rounds_per_key for count in counts.values()), "all rounds")
    assert max(max_in_flight_per_key.values()) == 1
    assert max_in_flight_total > 1, "the workers should have overlapped on different keys"


async def test_stop_waits_for_reconciles_in_flight() -> None:
    release = asyncio.Event()
    finished: list[Request] = []

    async def slow(req: Request) -> None:
        await release.wait()
        finished.append(req)

    controller = Controller("vm", slow, clock=FakeClock())
    run_task = asyncio.create_task(controller.run())
    controller.enqueue(VM_A)
    await until(lambda: controller.queue.is_processing(VM_A))
    stopping = asyncio.create_task(controller.stop())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not stopping.done()
    release.set()
    await stopping
    await run_task
    assert finished == [VM_A]
    assert controller.queue.shutting_down


async def test_stop_from_inside_a_reconcile_does_not_deadlock() -> None:
    controller: Controller

    async def stops_its_controller(req: Request) -> None:
        await controller.stop()

    controller = Controller("vm", stops_its_controller, clock=FakeClock())
    run_task = asyncio.create_task(controller.run())
    controller.enqueue(VM_A)
    await until(run_task.done, "the controller to stop")
    await run_task


async def test_cancelling_run_stops_the_workers_and_releases_keys() -> None:
    started = asyncio.Event()

    async def hangs(req: Request) -> None:
        started.set()
        await asyncio.Event().wait()

    controller = Controller("vm", hangs, clock=FakeClock())
    run_task = asyncio.create_task(controller.run())
    controller.enqueue(VM_A)
    await started.wait()
    run_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run_task
    assert not controller.queue.is_processing(VM_A)
    await controller.stop()  # returns at once once run has ended


async def test_a_controller_runs_only_once() -> None:
    controller = Controller("vm", ScriptedReconciler(None), clock=FakeClock())
    await controller.stop()
    await controller.run()  # the queue is already shut down: returns at once
    with pytest.raises(RuntimeError, match="already run"):
        await controller.run()


async def test_enqueue_with_delay() -> None:
    clock = FakeClock(start=5.0)
    controller = Controller("vm", ScriptedReconciler(None), clock=clock)
    controller.enqueue(VM_A, delay=10.0)
    controller.enqueue(VM_B)
    assert controller.queue.ready_at(VM_A) == 15.0
    assert controller.queue.ready_at(VM_B) == 5.0


@pytest.mark.parametrize(("kwargs", "match"), [({"workers": 0}, "worker"), ({"timeout_s": 0.0}, "timeout_s")])
def test_rejects_nonsense_settings(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Controller("vm", ScriptedReconciler(None), **kwargs)  # type: ignore[arg-type]


def test_metrics_live_on_the_given_registry_only() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    vms = Controller("vm", ScriptedReconciler(None), clock=FakeClock(), metrics=metrics)
    Controller("host", ScriptedReconciler(None), clock=FakeClock(), metrics=metrics)
    vms.enqueue(VM_A)
    vms.enqueue(VM_B, delay=60.0)
    assert sample(registry, "workqueue_depth", controller="vm") == 2.0
    assert sample(registry, "workqueue_depth", controller="host") == 0.0
    assert sample(registry, "reconcile_total", controller="host", result="error") == 0.0
    assert REGISTRY.get_sample_value("workqueue_depth", {"controller": "vm"}) is None


async def test_a_reconcile_that_never_awaits_does_not_starve_the_loop() -> None:
    done: list[Request] = []
    seen_by_bystander: list[int] = []
    bystanders: list[asyncio.Task[None]] = []

    async def bystander() -> None:
        seen_by_bystander.append(len(done))

    async def never_awaits(req: Request) -> None:
        if not bystanders:  # scheduled from inside the workers, so it can only run when they yield
            bystanders.append(asyncio.create_task(bystander()))
        done.append(req)

    keys = [Request("vm", f"vm-{i}") for i in range(1000)]
    controller = Controller("vm", never_awaits, workers=2, clock=FakeClock())
    for key in keys:
        controller.enqueue(key)
    async with running(controller):
        await until(lambda: len(done) == len(keys), "the drain")
        await bystanders[0]
    assert seen_by_bystander[0] < 10


async def test_drains_many_keys_through_the_workers() -> None:
    seen: list[Request] = []

    async def record(req: Request) -> None:
        seen.append(req)

    keys = [Request("vm", f"vm-{i}") for i in range(20_000)]
    controller = Controller("vm", record, workers=8, clock=FakeClock())
    for key in keys:
        controller.enqueue(key)
    async with running(controller):
        await until(lambda: len(seen) == len(keys) and controller.queue.processing_count == 0, "the drain")
    assert sorted(seen, key=lambda r: r.name) == sorted(keys, key=lambda r: r.name)
