"""Data directories written by earlier releases (``fixtures/``, made by
``scripts/make-upgrade-fixtures``), opened by the current code as ``serve --demo`` opens one."""

from __future__ import annotations

import logging
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import LiveServer, serving, wait_json
from virtplane.domain.networks import nic_claims
from virtplane.domain.resources import VirtualMachine
from virtplane.drivers.sim import SimCloud
from virtplane.server import ServeOptions, build

FIXTURES = Path(__file__).parent / "fixtures"

WITH_HOST_PATHS = ("245494f", "e3e7cb1")
"""Releases before the image library: volumes copied from host paths, kernels booted from them."""
RELEASES = (*WITH_HOST_PATHS, "8ce44f1", "fa36f81")
SIM_SCHEMA = {"245494f": "1", "e3e7cb1": "2", "8ce44f1": "2", "fa36f81": "3"}
"""The schema of the simulator's state file each release wrote (the current one is ``_persist.SCHEMA_VERSION``, 4)."""


@contextmanager
def upgraded(
    release: str, tmp_path: Path, before: Callable[[Path], None] | None = None
) -> Iterator[tuple[LiveServer, SimCloud]]:
    """The current server (``serve --demo``'s ``build``) on a copy of ``release``'s data
    directory, its simulated hosts reading the same ``sim.db`` the old release wrote;
    ``before`` may change that data directory first, as the old release could have."""
    data = tmp_path / "data"
    with tarfile.open(FIXTURES / f"{release}.tar.gz") as archive:
        archive.extractall(data, filter="data")
    if before is not None:
        before(data)
    options = ServeOptions(
        data_dir=data, demo=True, sim_boot_seconds=0.02, sim_shutdown_seconds=0.02, sim_link_mib_s=1e6
    )
    plane, _, _ = build(options)
    assert plane.sim is not None
    try:
        with serving(plane.store, plane, name="upgraded") as server:
            yield server, plane.sim
    finally:
        plane.store.close()


def files(server: LiveServer, sim: SimCloud, owner: str, pool: str) -> set[str]:
    """The files of a simulated pool (``owner`` is a local pool's host, "" a shared pool's)."""

    def names() -> set[str]:
        found = sim.storage.find_pool(owner, pool)
        return set() if found is None else set(found.volumes)

    result: set[str] = server.in_loop(names)
    return result


def run_operation(client: httpx.Client, name: str, spec: dict[str, Any], timeout: float = 20.0) -> Any:
    created = client.post("/v1/operations", json={"metadata": {"name": name}, "spec": spec})
    assert created.status_code == 201, created.text
    return wait_json(client, f"/v1/operations/{name}", lambda o: o["status"]["phase"] in FINISHED, timeout)


FINISHED = ("Completed", "Failed", "Superseded")


def settled(client: httpx.Client, vm: str, phase: str = "Running") -> Any:
    return wait_json(client, f"/v1/vms/{vm}", lambda v: v["status"]["phase"] == phase)


def assert_claims_held(server: LiveServer, client: httpx.Client) -> None:
    """Every address and MAC of every VM's NICs is claimed by that VM, and nothing else is."""
    wanted = {
        (claim.scope, claim.value): vm.metadata.name
        for vm in (VirtualMachine.model_validate(v) for v in client.get("/v1/vms").json()["items"])
        for claim in nic_claims(vm.spec.nics)
    }
    held = {(claim.scope, claim.value): holder.name for claim, holder in server.store.claims("")}
    assert held == wanted


@contextmanager
def said_by_virtplane() -> Iterator[list[str]]:
    """The messages virtplane's loggers give meanwhile, INFO and up, from a handler on the
    ``virtplane`` logger itself: pytest's caplog sits on the root logger, whose handlers a
    server configured in-process by an earlier test may have replaced (the full suite once
    captured nothing there)."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger = logging.getLogger("virtplane")
    handler, level = Keep(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
