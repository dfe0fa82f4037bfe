"""The deploy/ files and the system tools that check them (Debian packages ``prometheus``, ``systemd``).

A missing tool skips the test that needs it, and fails it in a full run (``bin/test`` as root,
which installs them first: ``scripts/system-deps.sh``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import FULL_RUN

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ALERT_RULES = DEPLOY / "prometheus" / "alerts.yml"
RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))


def tool_or_skip(name: str, package: str) -> str:
    """The path of the executable ``name``; without it the test skips, or fails in a full run."""
    path = shutil.which(name)
    if path is None:
        why = f"{name} is not installed (Debian package {package}; scripts/system-deps.sh installs it)"
        if FULL_RUN:
            pytest.fail(why)
        pytest.skip(why)
    return path
