"""``python -m bench --against REV [--pairs N] [--rows 1,3] [--short]``: this checkout against
another commit, the two measured in turn, pair by pair.

This machine's speed moves by a third within minutes (``docs/benchmarks.md``), so two runs
far apart compare the machine, not the code; a ratio within a pair, repeated, holds while the
speed drifts. Each side runs its own benchmarks and server: REV in a temporary git worktree
with its own code first on the path, this checkout as it is (uncommitted changes included).
Nothing is written: the figures of every pair and the median of their ratios are printed.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.report import ROOT
from bench.rows import Row

_ROW = re.compile(r"^row (\d+): (\S+) (.*?) \(")
"""What ``row_line`` prints; older commits print the same, so it reads their output too."""


def row_line(row: Row) -> str:
    """The line a run prints for each row it measured, the one ``figures`` reads back."""
    return f"row {row.number}: {row.figure} {row.unit} ({row.note or row.target})"


@dataclass(frozen=True)
class Figure:
    row: int
    value: float | None
    unit: str


def figures(output: str) -> dict[int, Figure]:
    """The rows a ``python -m bench`` run printed (``row N: FIGURE UNIT (...)``), by number."""
    found: dict[int, Figure] = {}
    for line in output.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        number, text, unit = match.groups()
        try:
            value: float | None = float(text.replace(",", ""))
        except ValueError:
            value = None  # "None": the row could not be measured on that side
        found[int(number)] = Figure(int(number), value, unit)
    return found


def ratios(pairs: list[tuple[dict[int, Figure], dict[int, Figure]]]) -> dict[int, list[float]]:
    """Per row, this checkout's figure over REV's, one ratio per pair where both were measured."""
    out: dict[int, list[float]] = {}
    for this, other in pairs:
        for number, mine in this.items():
            theirs = other.get(number)
            if mine.value is not None and theirs is not None and theirs.value:
                out.setdefault(number, []).append(mine.value / theirs.value)
    return out


def _run(root: Path, rows: str, short: bool, extra: list[str]) -> str:
    command = [sys.executable, "-m", "bench", "--rows", rows, *(["--short"] if short else []), *extra]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the bench in {root} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def compare(rev: str, pairs: int, rows: str, short: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="virtplane-against-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True)
        try:
            measured: list[tuple[dict[int, Figure], dict[int, Figure]]] = []
            for index in range(1, pairs + 1):
                theirs = figures(_run(tree, rows, short, []))
                mine = figures(_run(ROOT, rows, short, ["--no-write"]))
                measured.append((mine, theirs))
                for number in sorted(mine):
                    other = theirs.get(number)
                    print(
                        f"pair {index}: row {number}: this {mine[number].value} / {rev} "
                        f"{other.value if other else None} {mine[number].unit}",
                        flush=True,
                    )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    print()
    for number, values in sorted(ratios(measured).items()):
        unit = measured[0][0][number].unit
        print(
            f"row {number}: this / {rev} = {statistics.median(values):.3f} "
            f"(pairs {', '.join(f'{v:.3f}' for v in values)}; {unit})"
        )
