"""Live migration to a host's migration address (Host ``spec.migration_address``): the
``migrateToURI3`` parameters, so that the data goes to the address the admin named and
not to whatever the destination's hostname resolves to on the source."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import LiveServer, libvirt_or_skip
from virtplane.drivers.base import MigrationRequest
from virtplane.drivers.libvirt.migration import migration_parameters

DOMAIN_XML = "<domain type='test'><name>d</name><devices/></domain>"


def _params(request_address: str | None, driver_address: str | None = None) -> dict[str, Any]:
    request = MigrationRequest(
        domain="d", target_uri="qemu+tls://kvm-2.example/system", migration_address=request_address
    )
    params, _flags = migration_parameters(request, DOMAIN_XML, migration_address=driver_address)
    return params


@pytest.mark.parametrize(
    ("address", "uri", "listen"),
    [
        ("10.0.5.2", "tcp://10.0.5.2", "10.0.5.2"),
        ("kvm-2.migration.example", "tcp://kvm-2.migration.example", "kvm-2.migration.example"),
        ("fd00:5::2", "tcp://[fd00:5::2]", "fd00:5::2"),
        ("[fd00:5::2]", "tcp://[fd00:5::2]", "fd00:5::2"),
    ],
)
def test_the_target_hosts_migration_address_is_where_the_data_goes(
    address: str, uri: str, listen: str
) -> None:
    lv = libvirt_or_skip()

    params = _params(address, driver_address="192.0.2.9")

    assert params[lv.VIR_MIGRATE_PARAM_URI] == uri, "the request's (target's) address wins"
    assert params[lv.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] == listen


def test_without_an_address_libvirt_picks_the_destinations_hostname() -> None:
    lv = libvirt_or_skip()

    assert lv.VIR_MIGRATE_PARAM_URI not in _params(None)
    assert _params(None, driver_address="192.0.2.9")[lv.VIR_MIGRATE_PARAM_URI] == "tcp://192.0.2.9"


@pytest.mark.parametrize(
    ("address", "status"),
    [
        ("10.0.5.2", 201),
        ("fd00:5::2", 201),
        ("kvm-2.example", 201),
        ("10.0.5.2; rm -rf /", 422),
        ("a b", 422),
    ],
)
def test_the_api_checks_a_hosts_migration_address(live_server: LiveServer, address: str, status: int) -> None:
    host = {
        "apiVersion": "virtplane.io/v1",
        "kind": "Host",
        "metadata": {"name": "kvm-2"},
        "spec": {"uri": "test:///default", "migration_address": address},  # no traffic leaves
    }
    with live_server.client("admin") as client:
        answer = client.post("/v1/hosts", json=host)
    assert answer.status_code == status, answer.text
    if status == 201:
        assert answer.json()["spec"]["migration_address"] == address
    else:
        assert answer.json()["reason"] and "migration_address" in answer.json()["message"]
