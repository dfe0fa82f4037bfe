"""The crash-injection harness as a test: at least 50 SIGKILLs by default, any number with a flag.

VIRTPLANE_HARNESS_KILLS=500 VIRTPLANE_HARNESS_SEED=1234 pytest tests/harness -m slow
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.crash.server import free_port
from tests.harness.crash import Harness, write_report


@pytest.mark.slow
def test_fleet_survives_random_sigkills(tmp_path: Path) -> None:
    kills = int(os.environ.get("VIRTPLANE_HARNESS_KILLS", "50"))
    seed = int(os.environ.get("VIRTPLANE_HARNESS_SEED", str(random.SystemRandom().randrange(2**31))))
    print(f"crash harness seed {seed}: replay with VIRTPLANE_HARNESS_SEED={seed}")
    harness = Harness(tmp_path / "data", seed=seed, kills=kills)
    try:
        report = harness.run()
    finally:
        harness.server.stop()
    write_report(report)
    assert report.kills >= kills
    assert report.operations > 0 and report.faults_injected > 0, "the workload did something"
    assert report.invariant_violations == [], f"seed {seed}: " + "\n".join(report.invariant_violations)


@pytest.mark.slow
def test_fleet_survives_random_sigkills_with_the_roles_apart(tmp_path: Path) -> None:
    """The same workload and invariants with serve --workers 2: two API processes and the
    controllers' process, all killed by SIGKILL of serve (they die with it) and started again."""
    kills = int(os.environ.get("VIRTPLANE_HARNESS_SPLIT_KILLS", "10"))
    seed = int(os.environ.get("VIRTPLANE_HARNESS_SEED", str(random.SystemRandom().randrange(2**31))))
    print(f"crash harness (--workers 2) seed {seed}: replay with VIRTPLANE_HARNESS_SEED={seed}")
    args = ["--workers", "2", "--health-port", str(free_port())]
    harness = Harness(tmp_path / "data", seed=seed, kills=kills, server_args=args)
    try:
        report = harness.run()
    finally:
        harness.server.stop()
    assert report.kills >= kills
    assert report.operations > 0 and report.faults_injected > 0, "the workload did something"
    assert report.invariant_violations == [], f"seed {seed}: " + "\n".join(report.invariant_violations)


# The one line of the restore that keeps the intent across the overwrite from the snapshot.
KEEP_INTENT = "current.metadata.annotations = {**strip_system(captured.annotations), **system}"
DROP_INTENT = (
    "current.metadata.annotations = {**strip_system(captured.annotations), "
    '**{k: v for k, v in system.items() if "restore-power-state" not in k}}'
)


@pytest.mark.slow
def test_the_harness_catches_a_restore_that_loses_its_intent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flip the switch: a build whose restore drops restore-power-state must fail the harness."""
    import shutil

    import virtplane

    source = Path(virtplane.__file__).resolve().parent
    broken = tmp_path / "broken" / "virtplane"
    shutil.copytree(source, broken, ignore=shutil.ignore_patterns("__pycache__"))
    restore = broken / "controllers" / "restore.py"
    text = restore.read_text()
    assert KEEP_INTENT in text, "the restore changed: update this test's switch"
    restore.write_text(text.replace(KEEP_INTENT, DROP_INTENT))
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))  # the server subprocesses run the broken build
    harness = Harness(
        tmp_path / "data", seed=11, kills=25
    )  # ~20 restores: a sensitive one is all but certain
    try:
        report = harness.run()
    finally:
        harness.server.stop()
    assert report.restores > 0
    assert any("expected" in v for v in report.invariant_violations), report
