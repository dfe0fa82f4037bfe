"""Many writers on one object at once, through the live server: no lost update, no 5xx.

- PUT with the same resource_version from many threads: exactly one 200, every other
  writer a 409 Conflict, and the object afterwards is the winner's.
- PATCH without a resource_version from many threads: every 200 is in the final
  object, every change that did not land was answered with a 409 (reported, not lost);
  writers that retry their 409s all land.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from tests.fuzz.conftest import Figures

WRITERS = 16


@pytest.fixture(scope="module")
def api(shared_server: LiveServer) -> Iterator[httpx.Client]:
    with shared_server.client("admin") as client:
        yield client


def settled_vm(client: httpx.Client, name: str) -> dict[str, Any]:
    """Create a Manual VM and wait until the VM controller has taken it in (its writes race ours)."""
    created = client.post(
        "/v1/vms",
        json={"kind": "VirtualMachine", "metadata": {"name": name}, "spec": {"run_policy": "Manual"}},
    )
    assert created.status_code == 201, created.text
    for _ in range(500):
        vm: dict[str, Any] = client.get(f"/v1/vms/{name}").json()
        if vm["metadata"]["finalizers"] and vm["status"]["phase"] == "Stopped":
            return vm
        time.sleep(0.02)
    raise AssertionError(f"VM {name} did not settle: {vm}")


def at_once(server: LiveServer, role: str, work: Callable[[httpx.Client, int], Any]) -> list[Any]:
    """Run ``work(client, i)`` in WRITERS threads, each with its own connection, released together."""
    barrier = threading.Barrier(WRITERS)

    def run(i: int) -> Any:
        with server.client(role) as client:
            barrier.wait()
            return work(client, i)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        return list(pool.map(run, range(WRITERS)))


def test_put_with_one_resource_version_has_exactly_one_winner(
    shared_server: LiveServer, api: httpx.Client, figures: Figures
) -> None:
    name = "race-put"
    settled_vm(api, name)
    won = 0
    for round_ in range(10):
        base = api.get(f"/v1/vms/{name}").json()
        base.pop("status")

        def put(
            client: httpx.Client, i: int, base: dict[str, Any] = base, round_: int = round_
        ) -> httpx.Response:
            doc = {**base, "metadata": {**base["metadata"], "labels": {"writer": f"{round_}-{i}"}}}
            doc["spec"] = {**base["spec"], "cpu": 1 + i % 8, "memory_mib": 512 + i}
            return client.put(f"/v1/vms/{name}", json=doc)

        responses = at_once(shared_server, "operator", put)
        figures.add("concurrent", WRITERS)
        assert all(r.status_code in (200, 409) for r in responses), [r.text for r in responses]
        assert all(r.json()["reason"] == "Conflict" for r in responses if r.status_code == 409)
        winners = [i for i, r in enumerate(responses) if r.status_code == 200]
        assert len(winners) <= 1, f"round {round_}: {len(winners)} writers won with the same resource_version"
        final = api.get(f"/v1/vms/{name}").json()
        if not winners:
            # only possible if someone else (a controller) wrote in between: the version moved on
            assert final["metadata"]["resource_version"] != base["metadata"]["resource_version"]
            assert final["metadata"]["labels"] == base["metadata"]["labels"]
            continue
        won += 1
        winner = winners[0]
        answer = responses[winner].json()
        assert final["metadata"]["labels"] == {"writer": f"{round_}-{winner}"}
        assert final["spec"] == answer["spec"]
        assert final["spec"]["cpu"] == 1 + winner % 8 and final["spec"]["memory_mib"] == 512 + winner
    assert won >= 1, "no round had a winner: the VM never held still"


@pytest.mark.parametrize("section", ["labels", "annotations"])
def test_patch_without_resource_version_loses_nothing(
    shared_server: LiveServer, api: httpx.Client, figures: Figures, section: str
) -> None:
    name = f"race-patch-{section}"
    settled_vm(api, name)

    def patch(client: httpx.Client, i: int) -> httpx.Response:
        return client.patch(f"/v1/vms/{name}", json={"metadata": {section: {f"w{i}": f"v{i}"}}})

    responses = at_once(shared_server, "operator", patch)
    figures.add("concurrent", WRITERS)
    assert all(r.status_code in (200, 409) for r in responses), [r.text for r in responses]
    assert all(r.json()["reason"] == "Conflict" for r in responses if r.status_code == 409)
    final = api.get(f"/v1/vms/{name}").json()["metadata"][section]
    landed = {f"w{i}" for i, r in enumerate(responses) if r.status_code == 200}
    assert landed, "not one PATCH landed"
    for key in landed:
        assert final.get(key) == f"v{key[1:]}", f"{key} was answered 200 but is gone: {final}"
    # and a 409 means "not written": no change answered with one is in the object
    assert not {k for k in final if k.startswith("w")} - landed


def test_patch_writers_that_retry_their_conflicts_all_land(
    shared_server: LiveServer, api: httpx.Client, figures: Figures
) -> None:
    name = "race-retry"
    settled_vm(api, name)

    def patch_until_it_lands(client: httpx.Client, i: int) -> int:
        for attempt in range(1, 200):
            response = client.patch(
                f"/v1/vms/{name}",
                json={"metadata": {"labels": {f"w{i}": "x"}, "annotations": {f"example.com/w{i}": str(i)}}},
            )
            figures.add("concurrent")
            if response.status_code == 200:
                return attempt
            assert response.status_code == 409 and response.json()["reason"] == "Conflict", response.text
        raise AssertionError(f"writer {i} never landed")

    attempts = at_once(shared_server, "operator", patch_until_it_lands)
    final = api.get(f"/v1/vms/{name}").json()["metadata"]
    assert {k for k in final["labels"] if k.startswith("w")} == {f"w{i}" for i in range(WRITERS)}
    assert {k: v for k, v in final["annotations"].items() if k.startswith("example.com/")} == {
        f"example.com/w{i}": str(i) for i in range(WRITERS)
    }
    assert sum(attempts) >= WRITERS


def test_spec_patches_and_puts_mixed_keep_one_consistent_object(
    shared_server: LiveServer, api: httpx.Client, figures: Figures
) -> None:
    """Half the writers PATCH cpu, half PUT memory from one read: the result is one writer's spec, not a blend
    of a stale PUT over a newer PATCH."""
    name = "race-mixed"
    base = settled_vm(api, name)
    base.pop("status")

    def write(client: httpx.Client, i: int) -> httpx.Response:
        if i % 2:
            return client.patch(f"/v1/vms/{name}", json={"spec": {"cpu": 1 + i % 8}})
        doc = {**base, "spec": {**base["spec"], "memory_mib": 1024 + i}}
        return client.put(f"/v1/vms/{name}", json=doc)

    responses = at_once(shared_server, "operator", write)
    figures.add("concurrent", WRITERS)
    assert all(r.status_code in (200, 409) for r in responses), [r.text for r in responses]
    puts_won = [i for i, r in enumerate(responses) if r.status_code == 200 and i % 2 == 0]
    patches_won = [i for i, r in enumerate(responses) if r.status_code == 200 and i % 2]
    assert len(puts_won) <= 1  # they all carried the same resource_version
    final = api.get(f"/v1/vms/{name}").json()
    answers = [responses[i].json() for i in puts_won + patches_won]
    # the final object is the answer of the last write that landed, whichever it was
    last = max(answers, key=lambda a: a["metadata"]["resource_version"])
    assert final["spec"] == last["spec"]
    if puts_won:
        put_answer = responses[puts_won[0]].json()
        # a PATCH that landed after the PUT kept the PUT's memory; one before it was overwritten
        # only because the PUT's version was still current, i.e. no PATCH had landed before the PUT
        later = [
            a
            for a in answers
            if a["metadata"]["resource_version"] > put_answer["metadata"]["resource_version"]
        ]
        assert all(a["spec"]["memory_mib"] == 1024 + puts_won[0] for a in later)
        earlier = [
            a
            for a in answers
            if a["metadata"]["resource_version"] < put_answer["metadata"]["resource_version"]
        ]
        assert not earlier, "a PUT based on an old read overwrote a PATCH that had landed before it"
