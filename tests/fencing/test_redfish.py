"""The Redfish BMC client (sushy) against a real Redfish service: sushy-tools' emulator, started
on a loopback port with its libvirt driver over libvirt's test driver (whose default domain
``test`` runs), behind basic authentication."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import eventually_sync
from virtplane.domain.resources import RedfishFencing
from virtplane.fencing import (
    BmcCredentialsRejected,
    BmcSystemNotFound,
    BmcUnreachable,
    PowerState,
)
from virtplane.fencing.redfish import RedfishBmc

pytestmark = pytest.mark.slow  # an emulator process: about 40 s on two cores

USER, PASSWORD = "admin", "bmc-password"


def _missing() -> str | None:
    for module in ("sushy_tools", "libvirt", "bcrypt"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[test,libvirt]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Emulator:
    url: str
    system_id: str

    def bmc(
        self, *, system_id: str | None = None, password: str = PASSWORD, url: str | None = None
    ) -> RedfishBmc:
        config = RedfishFencing(
            address=url or self.url,
            system_id=system_id or self.system_id,
            credentials_secret="bmc",
            verify_tls=False,
        )
        return RedfishBmc(config, USER, password, timeout_s=5.0)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """One emulator for the module: only the last test powers its system off."""
    tmp_path = tmp_path_factory.mktemp("redfish")
    problem = _missing()
    if problem:
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    import bcrypt

    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt()).decode()}\n")
    config = tmp_path / "emulator.conf"
    config.write_text(f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n")
    port = _free_port()
    executable = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent)) or "sushy-emulator"
    log = (tmp_path / "emulator.log").open("w")
    proc = subprocess.Popen(
        [
            executable,
            "--config",
            str(config),
            "-i",
            "127.0.0.1",
            "-p",
            str(port),
            "--libvirt-uri",
            "test:///default",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def systems() -> list[str] | None:
            try:
                answer = httpx.get(f"{url}/redfish/v1/Systems", auth=(USER, PASSWORD), timeout=2)
            except httpx.TransportError:
                return None
            members = answer.json()["Members"] if answer.status_code == 200 else []
            return [m["@odata.id"].rsplit("/", 1)[-1] for m in members] or None

        ids = eventually_sync(systems, timeout=30)
        yield Emulator(url, ids[0])
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


async def test_wrong_credentials(emulator: Emulator) -> None:
    with pytest.raises(BmcCredentialsRejected, match="rejected the credentials"):
        await emulator.bmc(password="wrong").power_state()


async def test_a_system_id_that_does_not_exist(emulator: Emulator) -> None:
    with pytest.raises(BmcSystemNotFound, match="no-such-system"):
        await emulator.bmc(system_id="no-such-system").power_state()


async def test_an_address_where_no_bmc_answers(emulator: Emulator) -> None:
    with pytest.raises(BmcUnreachable, match=r"cannot be reached|did not answer"):
        await emulator.bmc(url=f"http://127.0.0.1:{_free_port()}").force_off()


async def test_no_credentials_in_a_repr(emulator: Emulator) -> None:
    assert PASSWORD not in repr(emulator.bmc())


async def test_force_off_is_confirmed_off(emulator: Emulator) -> None:
    bmc = emulator.bmc()
    assert await bmc.power_state() is PowerState.ON
    await bmc.force_off()
    assert await bmc.power_state() is PowerState.OFF
