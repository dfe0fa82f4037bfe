"""Rows 11-16: the control plane on real parts (two libvirt daemons, real QEMU guests), each
against a bound measured in the same run (``bench/real_bounds.py`` says which and why).

``python -m bench --rows 11,12,13,14,15,16`` (as root, after ``scripts/qemu/setup.sh``); a
short run takes these rows only when asked for (``bench/__main__.py``). Where a part is
missing (no root, no libvirt, no QEMU, no sushy-tools) or a step fails, the row's figure is
None with the reason: the bench never fails for it. This module imports none of those parts
(``bench/real_rows.py`` and ``bench/real_failover.py`` do, once they are known to be there).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import real_bounds as rb
from bench.rows import Row
from bench.sizes import Sizes

ROWS = frozenset(range(11, 17))

TITLES = {
    11: ("Start to guest-up of a real guest", "x libvirt's own boot", rb.START_TARGET),
    12: (
        "Live migration of an idle real guest",
        "x libvirt's migration of it paused",
        rb.IDLE_MIGRATION_TARGET,
    ),
    13: (
        "Live migration of a memory-dirtying real guest",
        "x libvirt's migration of it paused",
        rb.BUSY_MIGRATION_TARGET,
    ),
    14: ("Drain of a host with real guests", "x lower bound", rb.DRAIN_TARGET),
    15: (
        "Host failure to its must-run VM up elsewhere (aggressive settings)",
        "x what the settings allow",
        rb.FAILOVER_TARGET,
    ),
    16: (
        "Host failure to its must-run VM up elsewhere (default settings)",
        "x what the settings allow",
        rb.FAILOVER_TARGET,
    ),
}


def none_rows(rows: frozenset[int], why: str) -> list[Row]:
    return [
        rb.not_measured(n, TITLES[n][0], TITLES[n][1], f"<= {TITLES[n][2]:g}", why)
        for n in sorted(rows & ROWS)
    ]


def missing_prerequisites() -> str | None:
    """Why the real rows cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the real-parts rows run libvirtd and need root"
    try:
        import bcrypt  # noqa: F401
        import sushy_tools  # noqa: F401
        from tests.qemu import conftest
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]', scripts/qemu/setup.sh)"
    return conftest._missing_prerequisites()


async def guarded(rows: list[Row], numbers: frozenset[int], step: Callable[[], Awaitable[list[Row]]]) -> None:
    """Run one step of rows; a failure becomes their None rows with the reason (never a crash)."""
    try:
        rows += await step()
    except Exception as exc:
        traceback.print_exc()
        rows += none_rows(numbers, f"{type(exc).__name__}: {exc}"[:300])


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    del ceiling, profile_dir  # bounds of their own; py-spy would slow the guests' host as well
    wanted = ROWS if sizes.selected is None else sizes.selected & ROWS
    problem = missing_prerequisites()
    if problem is not None:
        return none_rows(wanted, problem)
    from bench.real_failover import measure_failover
    from bench.real_rig import rig_session
    from bench.real_rows import Bounds, drain, live_migrations, start_to_guest_up

    rows: list[Row] = []
    bounds = Bounds()
    try:
        async with rig_session(work / "real") as real:
            if {11, 15, 16} & wanted:
                await guarded(rows, frozenset({11}), lambda: _one(start_to_guest_up(real, sizes, bounds)))
            if {12, 13} & wanted:
                await guarded(
                    rows, frozenset({12, 13}) & wanted, lambda: live_migrations(real, sizes, bounds, wanted)
                )
            if 14 in wanted:
                await guarded(rows, frozenset({14}), lambda: _one(drain(real, sizes)))
            for number, defaults in ((15, False), (16, True)):
                if number in wanted:
                    await guarded(
                        rows,
                        frozenset({number}),
                        lambda number=number, defaults=defaults: _one(  # type: ignore[misc]
                            measure_failover(real, number, defaults, sizes, rb.median(bounds.boot_s))
                        ),
                    )
    except Exception as exc:  # the rig itself (its daemons, its validation boot): the rows not yet had
        traceback.print_exc()
        done = frozenset(row.number for row in rows)
        rows += none_rows(wanted - done, f"the rig failed: {type(exc).__name__}: {exc}"[:300])
    return rows


async def _one(row: Awaitable[Row]) -> list[Row]:
    return [await row]
