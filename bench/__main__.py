"""``python -m bench [--short] [--rows 1,4] [--profile]``: run the benchmarks, print the table.

Rows 11-16 run the control plane on real parts (two libvirt daemons, real QEMU guests; root,
``scripts/qemu/setup.sh``): a full run takes them, a short run (CI's) only when ``--rows``
names them, since they add 2.5-4 minutes to CI's 2-4 (``bin/test`` gives the short run 4).

A full run writes ``bench/results/<date>-full.json`` and regenerates the table of
``docs/benchmarks.md``; a short run (``--short``, what CI runs) only prints (``--save``:
and writes its JSON). Nothing here asserts a time: the table says which targets were met.
``--against REV`` measures this checkout and another commit in turn (``bench/against.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    against,
    api,
    ceiling,
    cli_start,
    drain,
    fleet,
    placement,
    postgres,
    real,
    real_backup,
    rebalance,
    report,
    soak,
    usage,
)
from bench.rows import Row
from bench.sizes import FULL, SHORT, Sizes

Session = Callable[[Path, Sizes, float, Path | None], Awaitable[list[Row]]]
SESSIONS: tuple[tuple[frozenset[int], Session], ...] = (
    (frozenset({1, 3, 4}), api.run),
    (frozenset({6}), drain.run),
    (frozenset({2, 5, 7, 8, 19}), fleet.run),
    (frozenset({9}), soak.run),
    (frozenset({10}), cli_start.run),
    (real.ROWS, real.run),
    (usage.ROWS, usage.run),
    (real_backup.ROWS, real_backup.run),
    (placement.ROWS, placement.run),
    (rebalance.ROWS, rebalance.run),
    (postgres.ROWS, postgres.run),
)
ALL_ROWS = frozenset(range(1, 20)) | real_backup.ROWS | placement.ROWS | rebalance.ROWS | postgres.ROWS
SHORT_ROWS = frozenset(range(1, 11))
"""What ``--short`` runs unless ``--rows`` says otherwise: the simulator's rows 1-10 (CI's budget).
Rows 11-16 and 20-22 (backups and restore) need the real rig; 17-19 (usage collection, the usage
API, the dashboard in Chromium) and 23 (placement with rules) mean something only at full size:
name them with ``--rows``. Row 24 (rebalancing) runs a solver for two minutes: also only when
named or in a full run. Rows 25-27 (rows 1, 2 and 3 on PostgreSQL, ``bench/postgres.py``) need
PostgreSQL installed: a full run takes them."""


def parse_rows(text: str) -> frozenset[int]:
    rows = frozenset(int(part) for part in text.split(",") if part.strip())
    unknown = rows - ALL_ROWS
    if unknown:
        raise argparse.ArgumentTypeError(f"no such rows: {sorted(unknown)} (rows are 1 to {max(ALL_ROWS)})")
    return rows


async def run(
    sizes: Sizes, rows: frozenset[int], work: Path, profile_dir: Path | None
) -> tuple[list[Row], float]:
    tx_per_s = ceiling.transactions_per_s(work / "ceiling.db", sizes.ceiling_s)
    print(f"raw-SQLite ceiling: {tx_per_s:,.0f} transactions per s", flush=True)
    measured: list[Row] = []
    for session_rows, session in SESSIONS:
        if rows & session_rows:
            selected = dataclasses.replace(sizes, selected=rows & session_rows)
            for row in await session(work, selected, tx_per_s, profile_dir):
                if row.number in rows:
                    print(against.row_line(row), flush=True)
                    print(f"       {row.details}", flush=True)
                    measured.append(row)
    postgres.judge(measured)
    return measured, tx_per_s


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--short", action="store_true", help="small sizes, a couple of minutes (CI)")
    parser.add_argument(
        "--rows", type=parse_rows, default=None, help="e.g. 1,4 (default: all; --short: 1 to 10)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="record each row with py-spy (slows the server)"
    )
    parser.add_argument("--save", action="store_true", help="write the JSON also for --short")
    parser.add_argument("--keep", action="store_true", help="keep the servers' data directories")
    parser.add_argument("--no-write", action="store_true", help="print only: no JSON, no docs/benchmarks.md")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="compare with another commit: the two in turn, --pairs times, ratios printed; writes nothing",
    )
    parser.add_argument("--pairs", type=int, default=3, help="with --against: how many pairs (default 3)")
    args = parser.parse_args()
    if args.rows is None:
        args.rows = SHORT_ROWS if args.short else ALL_ROWS
    if args.against:
        rows_text = ",".join(str(row) for row in sorted(args.rows))
        against.compare(args.against, max(1, args.pairs), rows_text, args.short)
        return
    sizes = SHORT if args.short else FULL
    work = Path(tempfile.mkdtemp(prefix="virtplane-bench-"))
    results = report.ROOT / "bench" / "results"
    profile_dir = results / "profiles" if args.profile else None
    started = datetime.now(UTC)
    load_start = report.load_average()
    measured_commit = report.commit()  # what runs, before anyone edits the checkout meanwhile
    try:
        rows, tx_per_s = asyncio.run(run(sizes, args.rows, work, profile_dir))
    finally:
        if args.keep:
            print(f"data directories kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result = report.record(
        rows,
        mode=sizes.name + ("-profiled" if args.profile else ""),
        ceiling=tx_per_s,
        started=started,
        load={"start": load_start, "end": report.load_average()},
        measured_commit=measured_commit,
    )
    print()
    print(report.table(result))
    if args.no_write:
        return
    if args.save or not args.short:
        path = report.write_json(result, results)
        print(f"wrote {path}")
        if not args.short and args.rows == ALL_ROWS and not args.profile:
            report.write_markdown(result, report.ROOT / "docs" / "benchmarks.md")
            print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
