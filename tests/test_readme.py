"""Every shell block of README.md runs as written against a fresh ``virtplane serve --demo``.

The export line is the one the server printed for itself (its own port and token); every
other command runs unchanged from the repository root, one at a time, and must exit 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.cli.test_main import RecordedServeOptions, fake_server_module  # noqa: F401 (a fixture)
from tests.crash.server import ServerProcess
from virtplane.cli.main import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXPORT = re.compile(r"^export VIRTPLANE_URL=\S+ VIRTPLANE_TOKEN=\S+$")

# The commands this test does not run, and why; each must still be in the README.
NOT_RUN = {
    "./bin/virtplane serve --demo": "set-up: the test starts the demo itself, on a free port and a fresh directory",
    "./bin/test": "set-up: the whole test suite",
    "./bin/virtplane events --follow": "follows the event log until interrupted",
    "./bin/virtplane console web-1": "attaches the terminal until Ctrl-] (tests/cli/test_console.py: a pty)",
    "./bin/virtplane vnc web-2": "forwards a port until Ctrl-C (tests/cli/test_vnc.py: a viewer on it)",
    "sudo apt-get install libvirt-clients libvirt-dev pkg-config gcc python3-dev": "installs system packages",
    '.venv/bin/pip install "libvirt-python==$(pkg-config --modversion libvirt)"': "changes the environment under test",
    "./bin/virtplane apply -f kvm-1.yaml": "adds a real hypervisor, reached over SSH",
    "./bin/virtplane describe host kvm-1": "describes that hypervisor",
    **dict.fromkeys(
        [
            "useradd --system --home-dir /var/lib/virtplane --shell /usr/sbin/nologin virtplane",
            "python3 -m venv /opt/virtplane/venv",
            '/opt/virtplane/venv/bin/pip install ".[postgres]"',
            "install -D -m 0644 deploy/config/virtplane.toml /etc/virtplane/virtplane.toml",
            "install -m 0644 deploy/systemd/*.service /etc/systemd/system/",
            "systemctl daemon-reload",
            "systemctl enable --now virtplane",
        ],
        "installs the service on this machine (tests/deploy/test_systemd.py checks the units)",
    ),
    **dict.fromkeys(
        [
            "promtool check rules deploy/prometheus/alerts.yml",
            "promtool test rules deploy/prometheus/tests/*.yml",
        ],
        "needs Debian's prometheus (tests/deploy/test_prometheus_rules.py runs both)",
    ),
}


def blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def shell_commands(markdown: str) -> list[str]:
    """The command lines of the ```sh blocks, without their trailing comments."""
    commands = []
    for block in blocks(markdown, "sh"):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                commands.append(command)
    return commands


def test_every_shell_block_of_the_readme_runs_as_written(tmp_path: Path) -> None:
    commands = shell_commands(README.read_text())
    assert set(NOT_RUN) <= set(commands), f"no longer in the README: {set(NOT_RUN) - set(commands)}"
    assert [c for c in commands if EXPORT.match(c)], "the README shows the export line"
    server = ServerProcess(tmp_path / "data", demo=True)
    server.start()
    try:
        printed = re.search(r"^\s*(export VIRTPLANE_URL=.*)$", server.log.read_text(), flags=re.MULTILINE)
        assert printed, "serve --demo prints the export line to paste"
        export = printed.group(1).strip()
        assert export == f"export VIRTPLANE_URL={server.url} VIRTPLANE_TOKEN={server.token}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTPLANE_")}
        env["VIRTPLANE_VENV"] = sys.prefix  # ./bin/virtplane runs this environment's virtplane
        ran = []
        for command in commands:
            if command in NOT_RUN or EXPORT.match(command):
                continue
            done = subprocess.run(
                ["bash", "-c", f"set -e\n{export}\n{command}"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, (
                f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
            ran.append(command)
        assert len(ran) >= 9, ran
    finally:
        server.stop()


def test_every_toml_block_of_the_readme_is_a_configuration_serve_accepts(
    tmp_path: Path,
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
) -> None:
    toml = blocks(README.read_text(), "toml")
    assert toml, "the README shows a configuration file"
    for number, text in enumerate(toml):
        config = tmp_path / f"{number}.toml"
        config.write_text(text)
        result = CliRunner().invoke(app, ["serve", "--config", str(config)], env={"COLUMNS": "200"})
        assert result.exit_code == 0, f"{text}\n{result.output}"
    assert len(fake_server_module) == len(toml)
