"""The whole path: ``virtplane serve --config FILE`` with the guide's ``[identity]`` (pointed at a
real slapd), and ``virtplane login`` in a process of its own, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.crash.server import ServerProcess
from tests.identity.slapd import Slapd
from tests.identity.test_config import guide_block


def test_serve_with_the_guides_identity_lets_a_directory_user_log_in(slapd: Slapd, tmp_path: Path) -> None:
    config = tmp_path / "virtplane.toml"
    config.write_text(guide_block().replace("ldap://ldap.example.org:389", slapd.url))
    server = ServerProcess(tmp_path / "data", extra_args=["--config", str(config)])
    server.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTPLANE_")}
        env.update(VIRTPLANE_URL=server.url, XDG_CONFIG_HOME=str(tmp_path / "home"))
        login = subprocess.run(
            [sys.executable, "-m", "virtplane.cli.main", "login", "--username", "carol", "--password-stdin"],
            input="carol-pw\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert login.returncode == 0, login.stdout + login.stderr
        assert "as ldap:carol (admin)" in login.stdout, login.stdout
        listed = subprocess.run(
            [sys.executable, "-m", "virtplane.cli.main", "token", "list", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr  # an admin's session, from the kept token
        assert '"owner": "ldap:carol"' in listed.stdout and '"owner_kind": "user"' in listed.stdout
        wrong = httpx.post(f"{server.url}/v1/login", json={"username": "carol", "password": "x"}, timeout=10)
        assert wrong.status_code == 401 and wrong.json()["reason"] == "LoginFailed"
    finally:
        server.stop()
