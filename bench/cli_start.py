"""Row 10: the CLI's start-up, as whole commands: ``virtplane --help`` and ``virtplane get vms``
against a live server with a few VMs (issue 39: under 0.3 s).

Each command is a new process, timed from its launch to its exit, with the bytecode cache on
(as where the package is installed: ``server.with_bytecode``). The ceiling of the same run is
``python -c pass``, the interpreter's own start-up, launched in turn with the commands so
that the machine's drift reaches them alike; the ratio is the command's median over it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.rows import Row, at_most, summary_ms
from bench.seed import host, running_vm, seed, shared_pool
from bench.server import BenchServer, with_bytecode
from bench.sizes import Sizes
from virtplane.domain.resources import Resource

TARGET_MS = 300.0
VMS = 20


def virtplane() -> list[str]:
    """The console script beside this Python (what ``bin/virtplane`` runs), else the module."""
    script = Path(sys.executable).parent / "virtplane"
    return [str(script)] if script.exists() else [sys.executable, "-m", "virtplane.cli.main"]


def whole_command_s(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(commands: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, list[float]]:
    """``runs`` launches of each command, in turn (one warm-up launch each, not counted)."""
    for command in commands.values():
        whole_command_s(command, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            samples[name].append(whole_command_s(command, env))
    return samples


def objects() -> list[Resource]:
    found: list[Resource] = [host("cli-1"), shared_pool("cli-pool")]
    return found + [running_vm(f"cli-vm-{i:02d}", "cli-1") for i in range(VMS)]


async def run(work: Path, sizes: Sizes, ceiling: float, profile_dir: Path | None) -> list[Row]:
    data = work / "cli"
    seed(data, objects())
    server = BenchServer(data)
    server.start()
    try:
        env = {**with_bytecode(), "VIRTPLANE_URL": server.url, "VIRTPLANE_TOKEN": server.token}
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "virtplane --help": [*virtplane(), "--help"],
            "virtplane get vms": [*virtplane(), "get", "vms"],
        }
        samples = measure(commands, env, sizes.cli_runs)
    finally:
        server.stop()
    medians = {name: statistics.median(s) * 1000 for name, s in samples.items()}
    worst = max(medians["virtplane --help"], medians["virtplane get vms"])
    return [
        Row(
            10,
            f"CLI start-up, whole command: `virtplane --help`, `virtplane get vms` ({VMS} VMs, live server)",
            round(worst, 1),
            "ms (median, the slower of the two)",
            f"<= {TARGET_MS:.0f} ms",
            at_most(worst, TARGET_MS),
            ratio=round(worst / medians["python -c pass"], 2),
            note=f"ratio to `python -c pass` of the same run ({medians['python -c pass']:.0f} ms), "
            f"not to the SQLite ceiling; " + ", ".join(f"{n} {ms:.0f} ms" for n, ms in medians.items()),
            details={
                **{name: summary_ms(s) for name, s in samples.items()},
            },
        )
    ]
