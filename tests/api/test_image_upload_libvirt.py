"""An upload over libvirt's test driver whose write fails on the second host: the copy the
first host already has is deleted again, and no Image is recorded (a failed upload leaves
nothing behind). The failure is real: host kvm-b already has a driver pool of the library's
name at another directory, which ``ensure_pool`` refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.api.test_image_upload import QCOW2, upload
from tests.api.test_images import manifest, wait
from tests.conftest import LiveServer, libvirt_or_skip
from tests.drivers.conftest import write_node_xml
from virtplane.drivers.libvirt.domain_xml import dir_pool_xml


def _on_loop(server: LiveServer, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, server.loop).result(10)


def test_a_write_that_fails_on_one_host_is_undone_on_the_others(
    live_server: LiveServer, tmp_path: Path
) -> None:
    libvirt_or_skip()
    uris = {name: write_node_xml(tmp_path / f"{name}.xml") for name in ("kvm-a", "kvm-b")}
    drivers = {name: _on_loop(live_server, live_server.plane.hosts.get(uri)) for name, uri in uris.items()}

    def volumes(host: str) -> list[str]:
        def names(conn: Any) -> list[str]:
            return sorted(conn.storagePoolLookupByName("lib").listVolumes())

        return list(_on_loop(live_server, drivers[host]._call(names)))

    # kvm-b's own pool "lib" is somewhere else: writing the library file there fails
    _on_loop(
        live_server,
        drivers["kvm-b"]._call(
            lambda conn: conn.storagePoolDefineXML(dir_pool_xml("lib", "/elsewhere"), 0).create(0)
        ),
    )
    with live_server.client("admin") as admin:
        for name, uri in uris.items():
            assert (
                admin.post("/v1/hosts", json=manifest("Host", name, uri=uri, cluster="c1")).status_code == 201
            )
        library = manifest(
            "StoragePool",
            "lib",
            kind="shared",
            cluster="c1",
            capacity_gib=10,
            content="images",
            path=str(tmp_path / "lib"),
        )
        assert admin.post("/v1/storagepools", json=library).status_code == 201
        for name in uris:
            wait(lambda name=name: admin.get(f"/v1/hosts/{name}").json()["status"]["connection"] == "Up")
        wait(lambda: "kvm-a" in admin.get("/v1/storagepools/lib").json()["status"]["reachable_hosts"])
        failed = upload(admin, "golden", QCOW2)
        assert (failed.status_code, failed.json()["reason"]) == (409, "UploadFailed"), failed.text
        assert "/elsewhere" in failed.json()["message"]
        assert admin.get("/v1/images/golden").status_code == 404
    assert volumes("kvm-a") == []  # written there first, then deleted again
