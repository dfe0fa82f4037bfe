"""``virtplane serve --demo`` itself, in a subprocess on a free loopback port, for the browser tests.

Only its timings are the tests' own, through serve's documented flags: guests boot and power
off in 20 ms, and the simulated migration link is fast enough that the demo's largest move
(db-1: 8 GiB of memory and a 20 GiB local disk) takes about half a second instead of 28.
A token for each role (named web-ROLE) is made over the API, as an admin would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.crash.server import ServerProcess

GUEST_S = 0.02
LINK_MIB_S = 60_000.0
ROLES = ("admin", "operator", "viewer")


@dataclass
class DemoServer:
    process: ServerProcess
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return self.process.url

    def client(self, role: str = "admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10.0)


@contextmanager
def serve_demo(data_dir: Path, running: tuple[str, ...] = ("web-1",)) -> Iterator[DemoServer]:
    """The demo server, once the VMs ``running`` run and the demo image is Ready."""
    process = ServerProcess(
        data_dir,
        demo=True,
        boot_s=GUEST_S,
        shutdown_s=GUEST_S,
        extra_args=["--sim-link-mib-s", str(LINK_MIB_S)],
    )
    process.start()
    try:
        tokens = {}
        with process.client() as admin:  # the token serve made; the page signs in with these
            for role in ROLES:
                made = admin.post("/v1/tokens", json={"name": f"web-{role}", "role": role})
                assert made.status_code == 201, made.text
                tokens[role] = made.json()["token"]
        for name in running:
            process.wait_for(f"/v1/vms/{name}", lambda vm: vm["status"]["phase"] == "Running")
        process.wait_for("/v1/images/debian-12", lambda image: image["status"].get("phase") == "Ready")
        yield DemoServer(process, tokens)
    finally:
        process.stop()


# --------------------------------------------------------------------------- what the API says


def vm(demo: DemoServer, name: str) -> dict[str, Any]:
    with demo.client("viewer") as client:
        found: dict[str, Any] = client.get(f"/v1/vms/{name}").json()
    return found


def operations_of(demo: DemoServer, vm_name: str, kind: str) -> list[dict[str, Any]]:
    with demo.client("viewer") as client:
        items = client.get("/v1/operations", params={"fieldSelector": f"spec.vm={vm_name}"}).json()["items"]
    return [op for op in items if op["spec"]["type"] == kind]


def completed(demo: DemoServer, vm_name: str, kind: str, count: int) -> list[dict[str, Any]]:
    """The VM's operations of ``kind`` once ``count`` of them have Completed."""
    ops = operations_of(demo, vm_name, kind)
    done = [op for op in ops if op["status"]["phase"] == "Completed"]
    return done if len(done) >= count else []
