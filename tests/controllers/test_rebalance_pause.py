"""When automatic rebalancing waits (issue 37): any host of the cluster in maintenance, down,
disconnected, being fenced or silent; the reason names the first such host by name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from virtplane.controllers.rebalance_inputs import pause_reason
from virtplane.domain.resources import FencePhase, FenceStatus, Host, HostConnection, HostSpec, Metadata
from virtplane.domain.resources import HostResourceState as S

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def host(name: str, **status: Any) -> Host:
    made = Host(metadata=Metadata(name=name), spec=HostSpec(uri=f"sim://{name}"))
    made.status.resource_state = S.ENABLED
    made.status.connection = HostConnection.UP
    for field, value in status.items():
        setattr(made.status, field, value)
    return made


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ({}, ""),
        ({"resource_state": S.DISABLED}, ""),  # takes no VMs, moves none by itself: no reason to wait
        ({"resource_state": S.PREPARE_FOR_MAINTENANCE}, "host h2 is PrepareForMaintenance"),
        ({"resource_state": S.ERROR_IN_MAINTENANCE}, "host h2 is ErrorInMaintenance"),
        ({"connection": HostConnection.DOWN}, "host h2 is Down"),
        ({"connection": HostConnection.DISCONNECTED}, "host h2 is Disconnected"),
        ({"fence": FenceStatus(phase=FencePhase.POWERING_OFF)}, "host h2 is being fenced"),
        ({"silent_since": NOW}, "host h2 stopped answering"),
    ],
)
def test_a_host_in_trouble_pauses_its_cluster(status: dict[str, Any], reason: str) -> None:
    assert pause_reason([host("h1"), host("h2", **status)]) == reason


def test_the_first_host_by_name_is_named() -> None:
    hosts = [host("h3", connection=HostConnection.DOWN), host("h2", resource_state=S.MAINTENANCE)]
    assert pause_reason(hosts) == "host h2 is Maintenance"
