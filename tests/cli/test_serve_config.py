"""``serve --config FILE``: every flag of serve from a TOML file, a flag on the command line
wins, and a key that is not a flag (or a value the flag would refuse) names itself and the file."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tests.cli.test_main import RecordedServeOptions, fake_server_module  # noqa: F401 (a fixture)
from tests.crash.server import ServerProcess, free_port
from virtplane.api.limits import RequestLimits
from virtplane.cli.main import app
from virtplane.http_limits import ConnectionLimits

EVERY_FLAG = """\
demo = true
data-dir = "{dir}"
host = "0.0.0.0"
port = 9000
db = "postgresql+psycopg://db/virtplane"
log-level = "DEBUG"
log-format = "json"
sim-boot-seconds = 0.1
sim-shutdown-seconds = 0.2
sim-link-mib-s = 50000
leader-lease-seconds = 6
tls-cert = "{dir}/cert.pem"
tls-key = "{dir}/key.pem"
insecure-http = true
secrets-key-file = "{dir}/secrets.key"
max-header-bytes = 16384
max-headers = 50
header-timeout = 2.5
idle-timeout = 30
max-connections = 500
max-connections-per-client = 20
max-watches-per-token = 10
writes-per-second = 5.0
write-burst = 10
role = "api"
workers = 3
health-port = 8472
"""


def serve_flags() -> set[str]:
    """serve's long flags without '--', from the command itself (so a new flag is counted)."""
    serve = get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {flag[2:] for param in serve.params for flag in param.opts if flag.startswith("--")} - {"config"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "virtplane.toml"
    path.write_text(text)
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    # the error panel's frame and wrapping aside, the message as one line
    return result.exit_code, " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


def test_every_flag_of_serve_can_come_from_the_file(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
) -> None:
    text = EVERY_FLAG.format(dir=tmp_path)
    keys = {line.split(" = ")[0] for line in text.splitlines()}
    assert keys == serve_flags(), "the example sets every flag"

    code, output = invoke("serve", "--config", str(write(tmp_path, text)))

    assert code == 0, output
    assert fake_server_module == [
        RecordedServeOptions(
            data_dir=tmp_path,
            host="0.0.0.0",
            port=9000,
            db_url="postgresql+psycopg://db/virtplane",
            demo=True,
            log_level="debug",
            log_format="json",
            sim_boot_seconds=0.1,
            sim_shutdown_seconds=0.2,
            sim_link_mib_s=50000,
            lease_s=6.0,
            tls_cert=tmp_path / "cert.pem",
            tls_key=tmp_path / "key.pem",
            insecure_http=True,
            secrets_key_file=tmp_path / "secrets.key",
            connection_limits=ConnectionLimits(
                max_header_bytes=16384,
                max_headers=50,
                header_timeout_s=2.5,
                idle_timeout_s=30,
                max_connections=500,
                max_connections_per_client=20,
            ),
            request_limits=RequestLimits(max_watches_per_token=10, writes_per_second=5.0, write_burst=10),
            role="api",
            workers=3,
            health_port=8472,
        )
    ]


def test_a_flag_on_the_command_line_wins_over_the_file(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
) -> None:
    config = write(tmp_path, EVERY_FLAG.format(dir=tmp_path))

    code, output = invoke("serve", "--port", "9100", "--config", str(config), "--log-level", "warning")

    assert code == 0, output
    [options] = fake_server_module
    assert (options.port, options.log_level) == (9100, "warning"), "the flags, before and after --config"
    assert (options.host, options.data_dir, options.demo) == ("0.0.0.0", tmp_path, True), "the file"


def test_without_the_file_serve_keeps_its_defaults(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
) -> None:
    code, output = invoke("serve", "--config", str(write(tmp_path, "# nothing set\n")))

    assert code == 0, output
    assert fake_server_module == [
        RecordedServeOptions(
            data_dir=Path("virtplane-data"),
            host="127.0.0.1",
            port=8470,
            db_url=None,
            demo=False,
            log_level="info",
        )
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "prot = 8470\n",
            "unknown key 'prot' in {path}; the keys are the flags of `virtplane serve` without '--': ",
        ),
        ("config = 'other.toml'\n", "unknown key 'config' in {path}"),
        ("port = 70000\n", "port = 70000 in {path}: "),
        ("port = 'http'\n", "port = 'http' in {path}: "),
        ("log-level = 'loud'\n", "log-level = 'loud' in {path}: "),
        ("sim-boot-seconds = -1\n", "sim-boot-seconds = -1 in {path}: "),
        ("db = {{ url = 'x' }}\n", "db in {path} must be a string, a number or true/false"),
        ("port = \n", "{path} is not TOML: "),
    ],
)
def test_a_key_that_is_not_a_flag_or_a_value_it_refuses_names_itself_and_the_file(
    fake_server_module: list[RecordedServeOptions],  # noqa: F811
    tmp_path: Path,
    text: str,
    message: str,
) -> None:
    path = write(tmp_path, text.format())

    code, output = invoke("serve", "--config", str(path))

    assert code == 2, output
    assert message.format(path=path) in output
    assert fake_server_module == [], "nothing started"


def test_a_missing_file_is_refused(fake_server_module: list[RecordedServeOptions], tmp_path: Path) -> None:  # noqa: F811
    code, output = invoke("serve", "--config", str(tmp_path / "none.toml"))

    assert code == 2 and f"cannot read {tmp_path / 'none.toml'}: No such file or directory" in output
    assert fake_server_module == []


def test_a_real_server_takes_the_file_and_the_flags_given_with_it(tmp_path: Path) -> None:
    """The real ``serve`` (ServerProcess gives --data-dir and --port; the file names others too)."""
    config = write(
        tmp_path,
        f'demo = true\ndb = "sqlite:///{tmp_path}/store/virtplane.db"\n'
        f'data-dir = "{tmp_path}/from-file"\nport = {free_port()}\n',
    )
    (tmp_path / "store").mkdir()
    server = ServerProcess(tmp_path / "data", extra_args=["--config", str(config)])
    server.start()
    try:
        with server.client() as client:  # on the flag's port, with the flag's data directory's token
            hosts = client.get("/v1/hosts").json()["items"]
    finally:
        server.stop()
    assert {h["metadata"]["name"] for h in hosts} == {"host-1", "host-2", "host-3"}, "demo, from the file"
    assert (tmp_path / "store" / "virtplane.db").is_file(), "the database the file names"
    assert not (tmp_path / "data" / "virtplane.db").exists()
    assert not (tmp_path / "from-file").exists(), "--data-dir won over the file"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{config.read_text().split('port = ')[1].strip()}/healthz", timeout=1)
