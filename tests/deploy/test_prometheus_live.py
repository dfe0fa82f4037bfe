"""A real Prometheus scrapes a real ``virtplane serve --demo`` and fires an alert after a fault.

It scrapes as the shipped ``deploy/prometheus/scrape.yml`` says: over HTTPS, verifying the
server against its CA, with a viewer token (``/metrics`` needs one).

The rules are the shipped ``deploy/prometheus/alerts.yml`` with every ``for:`` shortened to
1 s (the durations are covered by the promtool unit tests): the expressions, the metrics and
the scrape are what this test is about. Everything listens on loopback.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.crash.server import ServerProcess, free_port
from tests.deploy.tools import ALERT_RULES, DEPLOY, tool_or_skip
from tests.pki import TestCa

pytestmark = pytest.mark.slow  # about 10 s: a server, a Prometheus, a few scrapes

ALERT = "VirtplaneVMNotInDesiredPowerState"
SCRAPE_CONFIG = DEPLOY / "prometheus" / "scrape.yml"


def rules_with_short_for(path: Path) -> Path:
    """A copy of the shipped rules whose alerts fire after 1 s instead of minutes."""
    document: dict[str, Any] = yaml.safe_load(ALERT_RULES.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    path.write_text(yaml.safe_dump(document))
    return path


@contextmanager
def prometheus(directory: Path, target: str, token: str, ca_file: Path) -> Iterator[str]:
    """A Prometheus scraping ``target`` every second as deploy/prometheus/scrape.yml says, with
    ``token`` and ``ca_file`` where it names them, and evaluating the rules every second; its URL."""
    directory.mkdir()
    config: dict[str, Any] = yaml.safe_load(SCRAPE_CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(rules_with_short_for(directory / "alerts.yml"))]
    [job] = config["scrape_configs"]
    (directory / "virtplane.token").write_text(token + "\n")
    job["authorization"]["credentials_file"] = str(directory / "virtplane.token")
    job["tls_config"]["ca_file"] = str(ca_file)
    job["static_configs"] = [{"targets": [target]}]
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            tool_or_skip("prometheus", "prometheus"),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://{address}"
    try:
        poll(lambda: _ready(url, process, directory), "Prometheus ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(url: str, process: subprocess.Popen[bytes], directory: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited: {(directory / 'prometheus.log').read_text()[-3000:]}")
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def poll(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)


def query(url: str, promql: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]  # type: ignore[no-any-return]


def alerts_about(url: str, vm: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()
    return [
        a for a in body["data"]["alerts"] if a["labels"]["alertname"] == ALERT and a["labels"].get("vm") == vm
    ]


def test_prometheus_fires_the_power_state_alert_when_a_vm_cannot_start(tmp_path: Path) -> None:
    ca = TestCa(tmp_path / "pki")
    issued = ca.issue("server")
    server = ServerProcess(
        tmp_path / "virtplane",
        demo=True,
        ca_file=ca.pem,
        extra_args=["--tls-cert", str(issued.cert), "--tls-key", str(issued.key)],
    )
    server.start()
    try:
        server.wait_for("/v1/vms/web-1", lambda vm: vm["status"]["phase"] == "Running")
        with server.client() as admin:
            token = admin.post("/v1/tokens", json={"name": "prometheus", "role": "viewer"}).json()["token"]
        with prometheus(tmp_path / "prometheus", f"127.0.0.1:{server.port}", token, ca.pem) as url:
            # before the fault: scraped, in its desired power state, no alert
            in_state = 'virtplane_vm_in_desired_power_state{vm="web-1"} == 1'
            poll(lambda: query(url, in_state), "scrape of web-1 in its desired power state")
            assert alerts_about(url, "web-1") == []

            # the fault: every start of web-1 on its host fails from now on, and it crashes
            with server.client() as client:
                for kind in ({"kind": "fail-start", "count": 1000}, {"kind": "crash"}):
                    assert client.post("/v1/vms/web-1/faults", json=kind).status_code == 200

            firing = poll(
                lambda: [a for a in alerts_about(url, "web-1") if a["state"] == "firing"], f"firing {ALERT}"
            )
            assert firing[0]["annotations"]["summary"] == "VM web-1 is not in its desired power state"
            assert firing[0]["labels"]["severity"] == "warning"
            assert query(url, 'virtplane_vm_in_desired_power_state{vm="web-2"} == 1'), "others are fine"
            assert not [a for a in alerts_about(url, "web-2")]
    finally:
        server.stop()
