"""The crash-injection harness as a test: at least 50 SIGKILLs by default, any number with a flag.

VIRTPLANE_HARNESS_KILLS=500 VIRTPLANE_HARNESS_SEED=1234 pytest tests/harness -m slow
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

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
