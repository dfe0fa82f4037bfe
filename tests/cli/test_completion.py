"""Completion of resource names from the server in a real bash, kept briefly in a private cache."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import LiveServer

from .conftest import add_host, add_vm


def _complete(words: list[str], env: dict[str, str]) -> list[str]:
    """What bash offers for ``words`` after sourcing ``virtplane --show-completion bash``."""
    script = Path(sys.executable).parent / "virtplane"
    shell = (
        f'source <("{script}" --show-completion bash)\n'
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        f'_virtplane_completion "{script}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "-c", shell],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )
    assert done.stderr == "", done.stderr
    return done.stdout.split()


def _env(server: LiveServer, cache: Path, seconds: float) -> dict[str, str]:
    return {
        "VIRTPLANE_URL": server.url,
        "VIRTPLANE_TOKEN": server.tokens["admin"],
        "XDG_CACHE_HOME": str(cache),
        "VIRTPLANE_COMPLETION_CACHE_S": str(seconds),
    }


def test_names_come_from_the_server(server: LiveServer, tmp_path: Path) -> None:
    add_host(server, "node-1")
    for name in ("web-1", "web-2", "db-1"):
        add_vm(server, name)
    env = _env(server, tmp_path, 0)

    assert _complete(["virtplane", "vm", "stop", "''"], env) == ["db-1", "web-1", "web-2"]
    assert _complete(["virtplane", "vm", "start", "w"], env) == ["web-1", "web-2"]
    assert _complete(["virtplane", "get", "vm", "d"], env) == ["db-1"]
    assert _complete(["virtplane", "describe", "hosts", "''"], env) == ["node-1"]
    assert _complete(["virtplane", "host", "maintenance", "enable", "n"], env) == ["node-1"]
    assert _complete(["virtplane", "describe", "setting", "vm.start.backoff_b"], env) == [
        "vm.start.backoff_base_s"
    ]
    assert _complete(["virtplane", "get", "events", "''"], env) == [], "events have no names to complete"


def test_names_are_cached_briefly_in_a_file_only_its_user_reads(server: LiveServer, tmp_path: Path) -> None:
    add_vm(server, "web-1")
    cached = _env(server, tmp_path, 600)
    assert _complete(["virtplane", "vm", "stop", "''"], cached) == ["web-1"]
    add_vm(server, "web-2")

    again = _complete(["virtplane", "vm", "stop", "''"], cached)
    fresh = _complete(["virtplane", "vm", "stop", "''"], _env(server, tmp_path, 0))

    assert again == ["web-1"], "within the cache's time: the names kept"
    assert fresh == ["web-1", "web-2"], "past it: asked again"
    [cache_file] = (tmp_path / "virtplane").iterdir()
    assert stat.S_IMODE(cache_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache_file.parent.stat().st_mode) == 0o700
    assert server.tokens["admin"] not in cache_file.name + cache_file.read_text()


def test_no_server_completes_nothing_quietly(tmp_path: Path) -> None:
    env = {"VIRTPLANE_URL": "http://127.0.0.1:9", "XDG_CACHE_HOME": str(tmp_path)}

    assert _complete(["virtplane", "vm", "stop", "''"], env) == []
