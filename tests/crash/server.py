"""A real `virtplane serve` subprocess that tests can SIGKILL and restart on the same data."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from virtplane.domain.intents import SYSTEM_PREFIX
from virtplane.domain.seeds import SEED_VOLUMES

# A system annotation that is a record of what exists (the VM's seed files), not an intent
# waiting to be carried out: a settled VM may keep it.
RECORDS = frozenset({SEED_VOLUMES})


def intents_left(vm: dict[str, Any]) -> list[str]:
    """The VM's system annotations that are intents still to carry out."""
    return [k for k in vm["metadata"]["annotations"] if k.startswith(SYSTEM_PREFIX) and k not in RECORDS]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        demo: bool = False,
        boot_s: float = 0.05,
        shutdown_s: float = 0.05,
        extra_args: list[str] | None = None,
        ca_file: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.ca_file = ca_file
        """With TLS (--tls-cert in extra_args): the CA that signed the certificate; https:// URLs."""
        self.extra_args = list(extra_args or [])
        self.demo = demo
        self.boot_s = boot_s
        self.shutdown_s = shutdown_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "server.log"
        self.kills = 0
        self.log_offset = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else True

    @property
    def token(self) -> str:
        return (self.data_dir / "admin.token").read_text().strip()

    def start(self, crash_at: str | None = None, wait: bool = True) -> None:
        env = {k: v for k, v in os.environ.items() if k != "VIRTPLANE_CRASH_AT"}
        if crash_at:
            env["VIRTPLANE_CRASH_AT"] = crash_at
        args = [
            sys.executable, "-m", "virtplane.cli.main", "serve",
            "--data-dir", str(self.data_dir), "--port", str(self.port), "--log-level", "warning",
            "--sim-boot-seconds", str(self.boot_s), "--sim-shutdown-seconds", str(self.shutdown_s),
        ]  # fmt: skip
        if self.demo:
            args.append("--demo")
        args += self.extra_args
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}"
                )
            # this start's own banner first: an answer on the port alone may be another process's
            # (a server killed outright whose children live on: tests/runtime/test_serve_workers.py)
            with self.log.open("rb") as log:
                log.seek(self.log_offset)
                if b"VIRTPLANE_URL=" not in log.read():
                    time.sleep(0.05)
                    continue
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0, verify=self.verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout}s")

    def kill(self) -> None:
        """SIGKILL: no clean-up at all, like a power cut of the control plane."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.kills += 1
        self.proc = None

    def wait_killed(self, timeout: float = 30.0) -> int:
        """Wait for a crash point to kill the server; returns its exit code (-9)."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        self.proc = None
        self.kills += 1
        return code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10.0,
            verify=self.verify,
        )

    def look_again_at_stopped_vm(self, name: str) -> dict[str, Any]:
        """The stopped VM ``name`` once the VM controller has reconciled it after everything so far.

        The server is another process, so its reconciles cannot be watched directly: change
        the spec and wait for ``observed_generation`` to reach it. The reconcile that records
        it (a shut-off domain is redefined) decides the power state too, and stores both at
        once: a stopped VM that the controller would start is no longer Stopped by then.
        """
        with self.client() as c:
            vm = c.get(f"/v1/vms/{name}").json()
            grace = {"termination_grace_period_s": vm["spec"]["termination_grace_period_s"] + 1}
            assert c.patch(f"/v1/vms/{name}", json={"spec": grace}).status_code == 200
        return self.wait_for(
            f"/v1/vms/{name}", lambda v: v["status"]["observed_generation"] == v["metadata"]["generation"]
        )

    def wait_for(self, path: str, check: Any, timeout: float = 30.0) -> dict[str, Any]:
        """GET ``path`` until ``check(body)`` is true; returns the body."""
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        with self.client() as client:
            while time.monotonic() < deadline:
                response = client.get(path)
                if response.status_code == 200:
                    body = response.json()
                    if check(body):
                        return body
                time.sleep(0.05)
        raise AssertionError(f"{path} never satisfied the check; last: {body}")
