"""The documentation site builds with MkDocs in strict mode (a warning fails it), with the
references generated from the code: the API from the OpenAPI document, the CLI from the CLI,
the settings from the registry."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtplane.cli.exit_codes import ExitCode
from virtplane.domain.resources import VirtualMachineSpec
from virtplane.domain.settings import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
BUILD = [sys.executable, str(ROOT / "scripts" / "build_docs.py")]

pytest.importorskip("mkdocs", reason="the docs build needs the test extras (pip install -e '.[test]')")


def test_the_site_builds_strictly_with_every_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"

    done = subprocess.run([*BUILD, "--site-dir", str(site)], capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    for page in (
        "operator-guide",
        "architecture",
        "decisions",
        "benchmarks",
        "reference/api",
        "reference/cli",
    ):
        assert (site / page / "index.html").exists(), page
    settings = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    assert all(key in settings for key in REGISTRY), "every setting of the registry"
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "virtplane describe" in cli and "--install-completion" in cli
    assert all(f"{code.value}  " in cli for code in ExitCode), "the exit codes"
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "/v1/hosts/{name}/maintenance" in api and "409" in api
    assert (site / "reference" / "openapi.json").exists()
    kinds = (site / "reference" / "kinds" / "index.html").read_text(encoding="utf-8")
    for field in VirtualMachineSpec.model_fields:
        assert f"<code>spec.{field}</code>" in kinds, f"the field reference has spec.{field} of a VM"
    assert "<code>spec.nics.network</code>" in kinds and "<code>status.conditions</code>" in kinds


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strictness is real: a copy of the checkout whose guide links to a missing page."""
    copy = tmp_path / "repo"
    for part in ("docs", "scripts"):
        shutil.copytree(ROOT / part, copy / part)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    guide = copy / "docs" / "operator-guide.md"
    guide.write_text(
        guide.read_text(encoding="utf-8") + "\nSee [the missing page](missing.md).\n", encoding="utf-8"
    )

    done = _build(copy, tmp_path / "site")

    assert done.returncode != 0
    assert "missing.md" in done.stderr


def _build(copy: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """The docs build of a changed copy of the repository, as CI runs it."""
    return subprocess.run(
        [sys.executable, str(copy / "scripts" / "build_docs.py"), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _repo_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    for part in ("docs", "scripts"):
        shutil.copytree(ROOT / part, copy / part)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    return copy


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("Raise `host.liveness.disconnect_after_s` on a slow network.", "host.liveness.disconnect_after_s"),
        ("Every `migration.retry.*` setting applies.", "migration.retry.*"),
        ("```yaml\nkind: VirtualMachineReplica\nmetadata: {name: b}\n```", "VirtualMachineReplica"),
        ("Redfish fencing is in progress and not part of this release.", "not part of this release"),
        ("Stop it with `virtplane vm halt web-1`.", "no command halt"),
        ("Follow them with `virtplane events --tail`.", "no option --tail"),
    ],
    ids=[
        "unknown-setting",
        "unknown-settings-prefix",
        "unknown-kind",
        "unshipped-feature",
        "unknown-command",
        "unknown-option",
    ],
)
def test_a_statement_the_code_contradicts_fails_the_build(tmp_path: Path, statement: str, named: str) -> None:
    copy = _repo_copy(tmp_path)
    guide = copy / "docs" / "operator-guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + f"\n{statement}\n", encoding="utf-8")

    done = _build(copy, tmp_path / "site")

    assert done.returncode != 0
    assert "operator-guide.md" in done.stderr and named in done.stderr, done.stderr


def test_the_readme_states_nothing_the_code_contradicts() -> None:
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "scripts" / "build_docs.py")
    assert spec is not None and spec.loader is not None
    build_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_docs)

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert build_docs.check_statements(readme, "README.md") == []
    assert build_docs.check_commands(readme, "README.md") == []
