"""The API through a real HTTP client against the running app (uvicorn on a free port)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, eventually_sync, wait_json

MANIFESTS: dict[str, dict[str, Any]] = {
    "hosts": {"kind": "Host", "metadata": {"name": "h9"}, "spec": {"uri": "sim://h9", "cluster": "c1"}},
    "storagepools": {
        "kind": "StoragePool",
        "metadata": {"name": "p9"},
        "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": 100},
    },
    "networks": {
        "kind": "Network",
        "metadata": {"name": "n9"},
        "spec": {"kind": "bridge", "bridge": "br9", "cluster": "c1", "subnet": "10.9.0.0/24"},
    },
    "volumes": {"kind": "Volume", "metadata": {"name": "v9"}, "spec": {"pool": "p9", "size_gib": 5}},
    "vms": {
        "kind": "VirtualMachine",
        "metadata": {"name": "vm9"},
        "spec": {"run_policy": "Manual", "cpu": 1},
    },
    "snapshots": {"kind": "VirtualMachineSnapshot", "metadata": {"name": "s9"}, "spec": {"vm": "vm9"}},
    "operations": {
        "kind": "VirtualMachineOperation",
        "metadata": {"name": "o9"},
        "spec": {"vm": "vm9", "type": "Start"},
    },
}
CHANGES: dict[str, dict[str, Any]] = {
    "hosts": {"spec": {"enabled": False}},
    "storagepools": {"spec": {"capacity_gib": 200}},
    "networks": {"spec": {"vlan": 42}},
    "volumes": {"spec": {"size_gib": 6}},
    "vms": {"spec": {"cpu": 2}},
    "snapshots": {"metadata": {"labels": {"k": "v"}}},
    "operations": {"metadata": {"labels": {"k": "v"}}},
}


def test_healthz_and_openapi(live_server: LiveServer) -> None:
    with live_server.client(None) as client:
        assert client.get("/healthz").json()["status"] == "ok"
        spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for plural in [*MANIFESTS, "settings"]:
        assert f"/v1/{plural}" in paths
        assert f"/v1/{plural}/{{name}}" in paths or f"/v1/{plural}/{{key}}" in paths
    assert "/v1/events" in paths


@pytest.mark.parametrize("plural", list(MANIFESTS))
def test_crud_for_every_kind(live_server: LiveServer, plural: str) -> None:
    with live_server.client("admin") as client:
        # create the things the later kinds refer to
        for dependency in list(MANIFESTS)[: list(MANIFESTS).index(plural)]:
            assert client.post(f"/v1/{dependency}", json=MANIFESTS[dependency]).status_code == 201
        doc = MANIFESTS[plural]
        created = client.post(f"/v1/{plural}", json=doc)
        assert created.status_code == 201, created.text
        name = doc["metadata"]["name"]
        assert created.json()["metadata"]["uid"]
        listed = client.get(f"/v1/{plural}").json()["items"]
        assert name in [o["metadata"]["name"] for o in listed]
        got = client.get(f"/v1/{plural}/{name}").json()
        assert got["metadata"]["name"] == name

        patched = client.patch(f"/v1/{plural}/{name}", json=CHANGES[plural])
        assert patched.status_code == 200, patched.text
        current = patched.json()
        for section, values in CHANGES[plural].items():
            for key, value in values.items():
                assert current[section][key] == value

        # controllers write status meanwhile (a new resource_version): read, then replace, until no conflict
        for _ in range(20):
            current = client.get(f"/v1/{plural}/{name}").json()
            current["metadata"]["labels"] = {"replaced": "yes"}
            replaced = client.put(f"/v1/{plural}/{name}", json=current)
            if replaced.status_code != 409:
                break
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["metadata"]["labels"] == {"replaced": "yes"}

        assert client.post(f"/v1/{plural}", json=doc).json()["reason"] == "AlreadyExists"
        if plural == "operations":  # an operation under way cannot be deleted (409): its VM boots first
            wait_json(client, f"/v1/{plural}/{name}", lambda o: o["status"]["finished_at"])
        deleted = client.delete(f"/v1/{plural}/{name}")
        assert deleted.status_code == 200, deleted.text


def test_no_token_is_401_and_bad_token_is_401(live_server: LiveServer) -> None:
    with live_server.client(None) as client:
        response = client.get("/v1/vms")
        assert response.status_code == 401
        assert response.json()["reason"] == "Unauthorized"
        bad = client.get("/v1/vms", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401


def test_viewer_reads_but_cannot_write(live_server: LiveServer) -> None:
    with live_server.client("viewer") as client:
        assert client.get("/v1/vms").status_code == 200
        response = client.post("/v1/vms", json=MANIFESTS["vms"])
        assert response.status_code == 403
        body = response.json()
        assert body["reason"] == "Forbidden" and "operator" in body["message"]


def test_operator_manages_vms_but_not_hosts_or_settings(live_server: LiveServer) -> None:
    with live_server.client("operator") as client:
        assert client.post("/v1/vms", json=MANIFESTS["vms"]).status_code == 201
        assert client.post("/v1/hosts", json=MANIFESTS["hosts"]).status_code == 403
        assert (
            client.patch("/v1/settings/migration.max_per_cluster", json={"spec": {"value": 3}}).status_code
            == 403
        )


def _wait_settled(live_server: LiveServer, client: httpx.Client, name: str) -> None:
    """Until the VM controller has taken the VM in (finalizer, phase), its writes race ours;
    a reconcile started after that changes nothing more."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        vm = client.get(f"/v1/vms/{name}").json()
        if vm["metadata"]["finalizers"] and vm["status"]["phase"] == "Stopped":
            live_server.reconciled(name)
            return
        time.sleep(0.02)
    raise AssertionError(f"VM {name} did not settle")


def test_stale_write_is_409_and_keeps_the_winner(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        client.post("/v1/vms", json=MANIFESTS["vms"])
        _wait_settled(live_server, client, "vm9")
        first = client.get("/v1/vms/vm9").json()
        second = client.get("/v1/vms/vm9").json()
        first["spec"]["cpu"] = 3
        assert client.put("/v1/vms/vm9", json=first).status_code == 200
        second["spec"]["cpu"] = 4
        stale = client.put("/v1/vms/vm9", json=second)
        assert stale.status_code == 409
        assert stale.json()["reason"] == "Conflict"
        assert client.get("/v1/vms/vm9").json()["spec"]["cpu"] == 3


@pytest.mark.parametrize(
    ("body", "status", "reason", "words"),
    [
        ({"kind": "VirtualMachine", "metadata": {"name": "Bad_Name"}}, 422, "Invalid", "DNS-1123"),
        (
            {"kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"cpu": 0}},
            422,
            "Invalid",
            "spec.cpu",
        ),
        (
            {"kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"cpu": "two"}},
            422,
            "Invalid",
            "spec.cpu",
        ),
        (
            {"kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"gpu": 1}},
            422,
            "Invalid",
            "spec.gpu",
        ),
        (
            {"kind": "VirtualMachine", "metadata": {"name": "a"}, "spec": {"run_policy": "Often"}},
            422,
            "Invalid",
            "run_policy",
        ),
        ({"kind": "Host", "metadata": {"name": "a"}}, 422, "Invalid", "expected 'VirtualMachine'"),
    ],
)
def test_bad_input_gets_a_readable_4xx(
    live_server: LiveServer, body: dict[str, Any], status: int, reason: str, words: str
) -> None:
    with live_server.client("admin") as client:
        response = client.post("/v1/vms", json=body)
    assert response.status_code == status, response.text
    assert response.json()["reason"] == reason
    assert words in response.json()["message"]


def test_malformed_json_and_oversized_bodies(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        response = client.post("/v1/vms", content=b"{not json", headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["reason"] == "MalformedJSON"
        big = client.post(
            "/v1/vms", content=b"x" * (2 * 1024 * 1024), headers={"content-type": "application/json"}
        )
        assert big.status_code == 413 and big.json()["reason"] == "PayloadTooLarge"
        missing = client.get("/v1/vms/nothing-here")
        assert missing.status_code == 404 and "not found" in missing.json()["message"]


def test_settings_through_the_api(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        items = client.get("/v1/settings").json()["items"]
        keys = {s["metadata"]["name"]: s for s in items}
        strategy = keys["host.maintenance.local.storage.strategy"]
        assert strategy["spec"]["value"] == "Error"
        assert strategy["status"]["allowed"] == ["Error", "Migration", "ForceStop", "Stop"]
        ok = client.patch(
            "/v1/settings/host.maintenance.local.storage.strategy", json={"spec": {"value": "Stop"}}
        )
        assert ok.status_code == 200 and ok.json()["spec"]["value"] == "Stop"
        bad = client.patch(
            "/v1/settings/host.maintenance.local.storage.strategy", json={"spec": {"value": "Maybe"}}
        )
        assert bad.status_code == 400 and bad.json()["reason"] == "InvalidSetting"
        assert "ForceStop" in bad.json()["message"]
        unknown = client.put("/v1/settings/no.such", json={"spec": {"value": 1}})
        assert unknown.status_code == 404 and unknown.json()["reason"] == "UnknownSetting"
        reset = client.delete("/v1/settings/host.maintenance.local.storage.strategy")
        assert reset.json()["spec"]["value"] == "Error"


def test_system_annotations_cannot_be_set_or_dropped_by_users(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        doc = {
            **MANIFESTS["vms"],
            "metadata": {"name": "vm9", "annotations": {"virtplane.io/start-requested": "true", "mine": "1"}},
        }
        created = client.post("/v1/vms", json=doc).json()
        assert created["metadata"]["annotations"] == {"mine": "1"}


def test_events_record_writes(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        client.post("/v1/vms", json=MANIFESTS["vms"])
        events = client.get("/v1/events", params={"kind": "vms", "name": "vm9"}).json()["items"]
    assert any(e["reason"] == "Created" for e in events)


def test_a_demo_vm_runs_on_a_simulated_host(live_server: LiveServer) -> None:
    import time

    with live_server.client("admin") as client:
        client.post(
            "/v1/hosts", json={"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}
        )
        client.post(
            "/v1/vms",
            json={"kind": "VirtualMachine", "metadata": {"name": "web"}, "spec": {"run_policy": "AlwaysOn"}},
        )
        deadline = time.monotonic() + 10
        vm: dict[str, Any] = {}
        while time.monotonic() < deadline:
            vm = client.get("/v1/vms/web").json()
            if vm["status"]["phase"] == "Running":
                break
            time.sleep(0.05)
    assert vm["status"]["phase"] == "Running"
    assert vm["status"]["host"] == "h1"


def test_token_creation_is_admin_only(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        made = client.post("/v1/tokens", json={"name": "robot", "role": "viewer"})
        assert made.status_code == 201
        token = made.json()["token"]
    with httpx.Client(base_url=live_server.url, headers={"Authorization": f"Bearer {token}"}) as robot:
        assert robot.get("/v1/vms").status_code == 200
        assert robot.post("/v1/tokens", json={"name": "x", "role": "admin"}).status_code == 403


def test_prometheus_metrics(live_server: LiveServer) -> None:
    with live_server.client("admin") as client:
        client.post(
            "/v1/hosts", json={"kind": "Host", "metadata": {"name": "h1"}, "spec": {"uri": "sim://h1"}}
        )
        live_server.reconciled("h1", kind="Host")
        viewer = {"Authorization": f"Bearer {live_server.tokens['viewer']}"}
        assert httpx.get(f"{live_server.url}/metrics").status_code == 401, "it names every VM: a token"
        text = httpx.get(f"{live_server.url}/metrics", headers=viewer).text
    assert 'workqueue_depth{controller="VirtualMachine"}' in text
    successes = [
        line
        for line in text.splitlines()
        if line.startswith('reconcile_total{controller="Host",result="requeue_after"}')
    ]
    assert successes and float(successes[0].split()[-1]) >= 1, "the host was reconciled and counted"


def test_a_fault_aimed_at_a_vm_goes_to_its_host_and_a_wrong_host_is_a_clear_409(
    live_server: LiveServer,
) -> None:
    with live_server.client("admin") as client:
        for name in ("h1", "h2"):
            client.post(
                "/v1/hosts",
                json={"kind": "Host", "metadata": {"name": name}, "spec": {"uri": f"sim://{name}"}},
            )
        vm = {"kind": "VirtualMachine", "metadata": {"name": "web"}, "spec": {"run_policy": "AlwaysOn"}}
        client.post("/v1/vms", json=vm)
        placed = eventually_sync(lambda: client.get("/v1/vms/web").json()["status"]["host"])
        other = "h2" if placed == "h1" else "h1"

        wrong = client.post(f"/v1/hosts/{other}/faults", json={"kind": "crash", "vm": "web"})
        assert wrong.status_code == 409 and wrong.json()["reason"] == "WrongHost"
        assert f"runs on {placed}, not {other}" in wrong.json()["message"]

        hit = client.post("/v1/vms/web/faults", json={"kind": "crash"})
        assert hit.status_code == 200 and hit.json()["host"] == placed, hit.text
        host_fault = client.post("/v1/vms/web/faults", json={"kind": "host-down"})
        assert host_fault.status_code == 422 and host_fault.json()["reason"] == "Invalid"
        client.post("/v1/vms", json={**vm, "metadata": {"name": "off"}, "spec": {"run_policy": "AlwaysOff"}})
        nowhere = client.post("/v1/vms/off/faults", json={"kind": "crash"})
        assert nowhere.status_code == 409 and nowhere.json()["reason"] == "NotPlaced"
