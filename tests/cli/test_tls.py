"""TLS served by ``virtplane serve`` itself and verified by the CLI: a CA file, a pinned
fingerprint, clear refusals (exit 7) for an unknown CA or another certificate; SIGHUP swaps
the certificate for new connections on the same listener; plain HTTP only on loopback
unless ``--insecure-http``."""

from __future__ import annotations

import io
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tests.crash.server import ServerProcess, free_port
from tests.pki import Issued, TestCa
from virtplane.banner import print_fingerprint
from virtplane.server import ServeOptions, ServeRefused, server_tls
from virtplane.tls import sha256_fingerprint


def cli(
    server: ServerProcess, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VIRTPLANE_")}
    return subprocess.run(
        [sys.executable, "-m", "virtplane.cli.main", "--url", server.url, "--token", server.token, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "COLUMNS": "400", **(env or {})},
    )


def one_line(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def served_fingerprint(port: int) -> str:
    """The fingerprint of the certificate a new connection to ``port`` is given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        return sha256_fingerprint(tls.getpeercert(binary_form=True) or b"")


def tls_server(tmp_path: Path, issued: Issued, ca: TestCa) -> ServerProcess:
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(issued.cert, served / "cert.pem")
    shutil.copy(issued.key, served / "key.pem")
    return ServerProcess(
        tmp_path / "data",
        demo=True,
        ca_file=ca.pem,
        extra_args=["--tls-cert", str(served / "cert.pem"), "--tls-key", str(served / "key.pem")],
    )


@pytest.fixture
def ca(tmp_path: Path) -> TestCa:
    return TestCa(tmp_path / "pki")


def test_the_cli_talks_to_a_tls_server_it_trusts_and_refuses_one_it_does_not(
    tmp_path: Path, ca: TestCa
) -> None:
    issued = ca.issue("server")
    stranger = TestCa(tmp_path / "other", name="someone else's CA")
    server = tls_server(tmp_path, issued, ca)
    server.start()
    try:
        assert f"TLS certificate SHA-256 fingerprint: {issued.fingerprint}" in server.log.read_text()
        assert server.url.startswith("https://")

        by_flag = cli(server, "--ca-file", str(ca.pem), "get", "hosts")
        by_env = cli(server, "get", "hosts", env={"VIRTPLANE_CA_FILE": str(ca.pem)})
        pinned = cli(server, "--tls-fingerprint", issued.fingerprint, "get", "hosts")
        pinned_env = cli(
            server, "get", "hosts", env={"VIRTPLANE_TLS_FINGERPRINT": issued.fingerprint.lower()}
        )
        for result in (by_flag, by_env, pinned, pinned_env):
            assert result.returncode == 0, result.stderr
            assert "host-1" in result.stdout

        unknown = cli(server, "get", "hosts")  # the system's CAs: ours is not among them
        wrong_ca = cli(server, "--ca-file", str(stranger.pem), "get", "hosts")
        for result in (unknown, wrong_ca):
            assert result.returncode == 7, result.stderr
            message = one_line(result.stderr)
            assert "Error (CertificateNotTrusted)" in message
            assert f"the server's certificate at {server.url} is not trusted" in message
            assert "--ca-file or VIRTPLANE_CA_FILE" in message and "--tls-fingerprint" in message

        # backup streams through the same client: the same trust, the same refusal
        copy = tmp_path / "copy.db"
        saved = cli(server, "--ca-file", str(ca.pem), "backup", "-o", str(copy))
        assert saved.returncode == 0, saved.stderr
        assert copy.read_bytes().startswith(b"SQLite format 3")
        refused = cli(server, "backup", "-o", str(tmp_path / "refused.db"))
        assert refused.returncode == 7 and "Error (CertificateNotTrusted)" in one_line(refused.stderr)
        assert not (tmp_path / "refused.db").exists()

        other = stranger.issue("impostor")
        mismatch = cli(server, "--tls-fingerprint", other.fingerprint, "get", "hosts")
        assert mismatch.returncode == 7, mismatch.stderr
        message = one_line(mismatch.stderr)
        assert f"the server at {server.url} is not the one pinned" in message
        assert f"fingerprint is {issued.fingerprint}, not the pinned {other.fingerprint}" in message

        plain = cli(
            server,
            "--tls-fingerprint",
            issued.fingerprint,
            "--url",
            server.url.replace("https", "http"),
            "get",
            "hosts",
        )
        assert plain.returncode == 7 and "is not https://" in one_line(plain.stderr)
    finally:
        server.stop()


def test_the_fingerprint_is_printed_verbatim_even_where_it_spells_an_emoji_code() -> None:
    fingerprint = ":".join(["CD", "AB", "ID", "OK"] * 8)  # Rich's :cd: :ab: :id: :ok: emoji codes
    console = Console(file=io.StringIO(), width=80)
    print_fingerprint(console, fingerprint)
    assert console.file.getvalue() == f"TLS certificate SHA-256 fingerprint: {fingerprint}\n"  # type: ignore[attr-defined]


def test_sighup_serves_a_new_certificate_to_new_connections_on_the_same_listener(
    tmp_path: Path, ca: TestCa
) -> None:
    first, second = ca.issue("first"), ca.issue("second")
    server = tls_server(tmp_path, first, ca)
    server.start()
    try:
        assert served_fingerprint(server.port) == first.fingerprint
        with server.client() as kept:  # a connection opened before the reload
            assert kept.get("/healthz").status_code == 200
            served = tmp_path / "served"
            shutil.copy(second.cert, served / "cert.pem")
            shutil.copy(second.key, served / "key.pem")
            assert server.proc is not None
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 20
            while served_fingerprint(server.port) != second.fingerprint:
                assert time.monotonic() < deadline, "the new certificate was never served"
                time.sleep(0.05)
            assert kept.get("/healthz").status_code == 200, "the open connection goes on"
        assert server.proc.poll() is None

        # a broken pair (a half-copied key) is refused and the previous certificate kept
        (served / "key.pem").write_text("not a key\n")
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "TLS certificate not reloaded" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.05)
        assert served_fingerprint(server.port) == second.fingerprint
        with server.client() as client:
            assert client.get("/healthz").status_code == 200
    finally:
        server.stop()


def test_a_non_loopback_address_without_tls_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "virtplane.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
         "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip

    assert result.returncode == 1, result.stderr
    message = one_line(result.stderr)
    assert "Error (ServeRefused): 0.0.0.0 is not a loopback address and no certificate was given" in message
    assert "--tls-cert and --tls-key" in message and "--insecure-http" in message
    assert not (tmp_path / "data" / "virtplane.db").exists(), "nothing was started"


def test_insecure_http_on_a_non_loopback_address_is_allowed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "virtplane.server"):
        assert server_tls(ServeOptions(tmp_path, host="0.0.0.0", insecure_http=True)) is None
    assert "serving plain HTTP on 0.0.0.0 (--insecure-http)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "virtplane.server"):
        assert server_tls(ServeOptions(tmp_path, host="localhost")) is None
    assert caplog.text == "", "loopback needs no flag and no warning"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tls_cert": Path("c.pem")}, "--tls-cert and --tls-key go together"),
        (
            {"tls_cert": Path("/nonexistent/c.pem"), "tls_key": Path("/nonexistent/k.pem")},
            "cannot read /nonexistent/c.pem",
        ),
    ],
)
def test_a_tls_pair_that_cannot_be_used_is_refused(
    tmp_path: Path, given: dict[str, Path], message: str
) -> None:
    with pytest.raises(ServeRefused, match=message):
        server_tls(ServeOptions(tmp_path, **given))  # type: ignore[arg-type]


def test_a_certificate_and_a_key_that_are_not_a_pair_are_refused(tmp_path: Path, ca: TestCa) -> None:
    one, other = ca.issue("one"), ca.issue("other")
    with pytest.raises(ServeRefused, match="are not a PEM certificate and its private key"):
        server_tls(ServeOptions(tmp_path, tls_cert=one.cert, tls_key=other.key))
