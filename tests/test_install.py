"""Install only what runs (issue 39): ``serve --demo`` on a fresh clone installs the server's and
CLI's runtime set; ``./bin/test`` adds the test tools to the same .venv when they are missing.

The shell functions of bin/_env.sh run for real, against a virtual environment whose ``python``
and ``pip`` only record how they were called (a real install takes minutes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_TOOLS = {"pytest", "mypy", "ruff", "hypothesis", "playwright", "schemathesis", "mkdocs", "import-linter"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_the_runtime_set_names_no_test_tool() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    test_extra = {_name(r) for r in project["optional-dependencies"]["test"]}
    assert test_extra >= TEST_TOOLS
    assert not runtime & test_extra, runtime & test_extra


def _fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    for tool in ("python", "pip"):
        script = venv / "bin" / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n')
        script.chmod(0o755)
    return venv, log


def _run(function: str, venv: Path, log: Path) -> list[str]:
    """The pip installs one call of ``function`` (from bin/_env.sh) made."""
    log.unlink(missing_ok=True)
    env = {**os.environ, "VIRTPLANE_VENV": str(venv), "ROOT": str(ROOT)}
    subprocess.run(["bash", "-c", f'. "$ROOT/bin/_env.sh" && {function}'], env=env, check=True)
    calls = log.read_text().splitlines() if log.exists() else []
    return [call.split("-e ", 1)[1] for call in calls if call.startswith("pip install")]


def test_the_cli_installs_the_runtime_set_and_the_tests_add_their_tools(tmp_path: Path) -> None:
    venv, log = _fake_venv(tmp_path)
    assert _run("ensure_venv", venv, log) == [str(ROOT)], "no extras for serve and the CLI"
    assert _run("ensure_venv", venv, log) == [], "installed once (the stamp)"
    assert _run("ensure_test_venv", venv, log) == [f"{ROOT}[test,postgres]"], "the same venv, plus tests"
    assert _run("ensure_test_venv", venv, log) == [], "the test tools once too (a second stamp)"
    assert _run("ensure_venv", venv, log) == []


def test_each_entry_point_asks_for_its_own_set() -> None:
    def asks(script: str) -> list[str]:
        return re.findall(r"^\s*(ensure_\w+)", (ROOT / "bin" / script).read_text(), re.MULTILINE)

    assert asks("virtplane") == ["ensure_venv"]
    assert asks("test") == ["ensure_test_venv"]


@pytest.mark.slow
def test_a_fresh_venv_gets_the_runtime_set_and_runs_the_cli(tmp_path: Path) -> None:
    """A real install (about a minute with pip's cache warm): what ``serve --demo`` installs on
    a fresh clone has no test tool, and the CLI runs from it."""
    venv = tmp_path / "venv"
    env = {**os.environ, "VIRTPLANE_VENV": str(venv), "ROOT": str(ROOT)}
    subprocess.run(["bash", "-c", '. "$ROOT/bin/_env.sh" && ensure_venv'], env=env, check=True, timeout=900)
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format", "json"], capture_output=True, text=True, check=True
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "virtplane" in installed and "fastapi" in installed
    assert not installed & TEST_TOOLS, installed & TEST_TOOLS
    assert not (venv / ".virtplane-test-installed").exists()
    version = subprocess.run([str(venv / "bin" / "virtplane"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("virtplane "), version
