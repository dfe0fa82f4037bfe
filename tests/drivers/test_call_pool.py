"""The libvirt driver's call pool: a caller that gives up on a call (a time limit, as the host
look's) leaves no outcome behind for asyncio to complain about when the call ends at last."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

from virtplane.drivers.libvirt.call_pool import CallPool


async def test_a_call_given_up_on_leaves_no_unretrieved_failure() -> None:
    loop = asyncio.get_running_loop()
    complaints: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: complaints.append(context))
    pool = CallPool("test:///held")
    held = threading.Event()
    ended = threading.Event()

    def stopped_daemon() -> None:
        held.wait(10)
        ended.set()
        raise RuntimeError("the daemon answered at last: connection reset")

    try:
        async with asyncio.timeout(0.05):
            await pool.run(stopped_daemon)
    except TimeoutError:
        pass
    held.set()
    pool.close()
    # the worker has ended, and with it handed the call's outcome to the loop
    await asyncio.to_thread(pool.executor.shutdown, True)
    for _ in range(3):  # the loop sets the outcome on the call's future; then it is collected
        await asyncio.sleep(0)
    gc.collect()
    assert ended.is_set() and complaints == []
