"""Fixtures of the fuzz suite, and its figures: written to $VIRTPLANE_REPORT_DIR/fuzz.json at the end.

Every test here counts what it sent (``Figures``): generated cases per schemathesis pass,
hand-written bad inputs, requests of the authorization matrix. A test that fails is
counted too (``pytest_runtest_logreport``), so a report command can print the lot later.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, serving
from virtplane.store.store import Store, sqlite_url


class Figures:
    """Thread-safe counters; tests call ``add(kind, n)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.failed_tests: list[str] = []
        self.passed_tests = 0

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] += n

    def as_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "generated_cases": sum(v for k, v in c.items() if k.startswith("generated.")),
            "generated_as_admin": c["generated.admin"],
            "generated_as_viewer": c["generated.viewer"],
            "admin_cases_accepted": c["accepted.admin"],
            "max_examples": int(os.environ.get("VIRTPLANE_FUZZ_EXAMPLES", "25")),
            "hand_written_inputs": c["bad_input"],
            "authz_requests": c["authz"],
            "concurrent_writes": c["concurrent"],
            "tests_passed": self.passed_tests,
            "tests_failed": len(self.failed_tests),
            "failures": self.failed_tests,
        }


FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    return FIGURES


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Like ``live_server``, but one server for a whole module: the fuzzer's state piles up, as in life."""
    store = Store(sqlite_url(tmp_path_factory.mktemp("fuzz") / "fuzz.db"))
    store.migrate()
    with serving(store, name="fuzz") as server:
        yield server
    store.close()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/fuzz/" not in report.nodeid.replace("\\", "/"):
        return
    if report.failed:
        FIGURES.failed_tests.append(f"{report.nodeid} ({report.when})")
    elif report.passed and report.when == "call":
        FIGURES.passed_tests += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report_dir = os.environ.get("VIRTPLANE_REPORT_DIR")
    if not report_dir or not (FIGURES.counts or FIGURES.failed_tests or FIGURES.passed_tests):
        return
    path = Path(report_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / "fuzz.json").write_text(json.dumps(FIGURES.as_json(), indent=2) + "\n")
