"""Deleting what something else uses is refused, one guard per kind (services/deletion_guards.py).
The API tests cover most guards through the app; these are the ones no other test reaches."""

from __future__ import annotations

import pytest

from tests.conftest import make_plane
from tests.controllers.helpers import add_host, add_vm, wait_phase
from virtplane.domain.errors import Refused
from virtplane.domain.resources import Host, RunPolicy
from virtplane.services.admission import Admission
from virtplane.store.store import Store


async def test_a_host_with_vms_cannot_be_deleted_and_one_without_can(store: Store) -> None:
    plane = make_plane(store)
    await plane.start()
    try:
        add_host(plane, "h1")
        add_host(plane, "h2")
        add_vm(plane, "web", RunPolicy.ALWAYS_ON, placement={"host_affinity": ["h1"]})
        await wait_phase(plane, "web", "Running")
        admission = Admission(store, plane.cache)
        with pytest.raises(Refused) as refused:
            admission.on_delete(store.get(Host, "h1"))
        assert refused.value.reason == "HostInUse" and "web" in str(refused.value), refused.value
        admission.on_delete(store.get(Host, "h2"))  # no VM there: no refusal
    finally:
        await plane.stop()
