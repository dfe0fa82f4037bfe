"""One benchmarked server: a ``python -m bench.serve`` subprocess on its own data directory.

The bench seeds the store (``seed.py``) before ``start``, talks to the server over HTTP
(``client``), reads its CPU time and memory from ``/proc`` and, with ``profile``, records
where its time goes with py-spy while a row runs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 300.0
_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class BenchServer:
    def __init__(
        self,
        data_dir: Path,
        *,
        link_mib_s: float = 1000.0,
        migration_tick_s: float = 0.05,
        profile_dir: Path | None = None,
        db_url: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.db_url = db_url
        """The store's URL (PostgreSQL rows); None: SQLite in the data directory."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.link_mib_s = link_mib_s
        self.migration_tick_s = migration_tick_s
        self.profile_dir = profile_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.launched_at = 0.0
        self.ready_at = 0.0
        self.token = ""

    @property
    def db_path(self) -> Path | str:
        """What ``observe`` reads: the SQLite file, or the PostgreSQL URL."""
        return self.db_url or self.data_dir / "virtplane.db"

    def start(self) -> None:
        """Launch the server and wait until it answers /healthz (its controllers are running then)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir / "server.log").open("ab")
        command = [
            sys.executable,
            "-m",
            "bench.serve",
            str(self.data_dir),
            str(self.port),
            "--link-mib-s",
            str(self.link_mib_s),
            "--migration-tick-s",
            str(self.migration_tick_s),
            *(["--db", self.db_url] if self.db_url else []),
        ]
        env = with_bytecode()
        self.launched_at = time.time()
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}; see {log.name}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer within {READY_TIMEOUT_S} s")
            time.sleep(0.05)
        self.ready_at = time.time()
        self.token = (self.data_dir / "admin.token").read_text().strip()

    def stop(self) -> None:
        if self.process is not None:
            interrupt(self.process)
            self.process = None

    def __enter__(self) -> BenchServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def client(self, timeout: float = 60.0) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=timeout,
            limits=limits,
        )

    # ------------------------------------------------------------------ what the process uses

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User and system CPU time the server used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def wait_quiet(self, *, below: float = 0.15, window_s: float = 0.5, timeout_s: float = 120.0) -> None:
        """Wait until the server uses less than ``below`` of a core over ``window_s`` (what a
        row measures should not share the server with the set-up's aftermath)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            used = self.cpu_seconds()
            time.sleep(window_s)
            if self.cpu_seconds() - used < below * window_s:
                return

    @contextlib.contextmanager
    def profile(self, name: str) -> Iterator[None]:
        """Sample the server with py-spy while the block runs (collapsed stacks in profile_dir)."""
        spy = py_spy()
        if self.profile_dir is None or spy is None:
            yield
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        out = self.profile_dir / f"{name}.txt"
        recorder = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(self.pid),
                "--format",
                "raw",
                "--rate",
                "200",
                "--nonblocking",
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield
        finally:
            interrupt(recorder)


def with_bytecode() -> dict[str, str]:
    """The server's environment, with Python's bytecode cache on, as a server runs where it is
    installed. This machine sets PYTHONDONTWRITEBYTECODE, with which every launch compiles
    virtplane's 170 modules again (0.13 s of a start-up, which row 2 counts); pip compiles
    an installed package when it installs it, and so does this, once (into ``__pycache__``
    beside the sources, which git ignores)."""
    _compile_sources()
    return _environment()


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


@functools.cache
def _compile_sources() -> None:
    command = [sys.executable, "-m", "compileall", "-q", str(ROOT / "src"), str(ROOT / "bench")]
    subprocess.run(command, env=_environment(), check=True, stdout=subprocess.DEVNULL)


def py_spy() -> str | None:
    """The py-spy beside this Python, else one on the PATH; None without either (not a dependency)."""
    return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


def interrupt(process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Ctrl-C for ``process`` (a server shuts down cleanly, py-spy writes its profile); killed
    if it has not ended after ``timeout_s``."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
