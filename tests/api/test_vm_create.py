"""Many VMs at once (``POST /v1/vms/actions/create``), from a spec or from a template, on the
simulator through the real app: each clone gets a full copy of the template's disk, its own
MAC, address and cloud-init instance id, as the guest reads them from its seed."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import LiveServer, eventually_sync, wait_json
from virtplane.drivers.base import domain_name
from virtplane.drivers.sim import SimCloud
from virtplane.seed_iso import read_seed_iso

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 me@laptop"


def _manifest(resource: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": resource, "metadata": {"name": name}, "spec": spec}


PLURALS = {"Host": "hosts", "StoragePool": "storagepools", "Image": "images", "Network": "networks"}


@pytest.fixture
def world(live_server: LiveServer) -> Iterator[LiveServer]:
    """A host, a shared volume pool, a library with a disk image, a network with addresses."""
    sim = live_server.plane.sim
    assert isinstance(sim, SimCloud)
    sim.put_image_file("lib", "disk.qcow2", "golden", size_gib=2)
    sim.add_host("h1", 16, 16384, ["br0"])  # has the network's bridge
    with live_server.client("admin") as admin:
        for doc in (
            _manifest("Host", "h1", uri="sim://h1", cluster="c1"),
            _manifest("StoragePool", "vols", kind="shared", cluster="c1", capacity_gib=100),
            _manifest("StoragePool", "lib", kind="shared", cluster="c1", capacity_gib=100, content="images"),
            _manifest("Image", "disk", pool="lib", file="disk.qcow2", kind="Disk"),
            _manifest(
                "Network", "lan", kind="bridge", bridge="br0", cluster="c1", subnet="10.1.0.0/24",
                gateway="10.1.0.1", range={"start": "10.1.0.10", "end": "10.1.0.50"},
            ),
        ):  # fmt: skip
            created = admin.post(f"/v1/{PLURALS[doc['kind']]}", json=doc)
            assert created.status_code == 201, created.text
        wait_json(admin, "/v1/images/disk", lambda i: i["status"]["phase"] == "Ready")
    yield live_server


def _template(operator: Any) -> dict[str, Any]:
    """tmpl: a VM made from the image with one NIC and an SSH key, stopped and made a template."""
    made = operator.post(
        "/v1/vms/actions/create",
        json={
            "names": ["tmpl"],
            "spec": {"run_policy": "Manual", "memory": "1Gi", "nics": [{"network": "lan"}],
                     "cloud_init": {"ssh_authorized_keys": [KEY]}},
            "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size_gib": "4Gi", "source": {"image": "disk"}},
                         "boot_order": 1}],
        },
    )  # fmt: skip
    assert made.status_code == 201, made.text
    assert [i["kind"] for i in made.json()["items"]] == ["Volume", "VirtualMachine"]
    wait_json(operator, "/v1/volumes/tmpl-root", lambda v: v["status"]["phase"] == "Ready")
    tmpl = wait_json(
        operator, "/v1/vms/tmpl", lambda v: v["status"]["phase"] == "Stopped" and v["status"]["nics"]
    )
    running = operator.patch("/v1/vms/tmpl", json={"spec": {"template": True}})
    assert running.status_code == 422 and running.json()["reason"] == "TemplateRuns", running.text
    made_template = operator.patch(
        "/v1/vms/tmpl", json={"spec": {"template": True, "run_policy": "AlwaysOff"}}
    )
    assert made_template.status_code == 200, made_template.text
    return dict(tmpl)


def _seed_of(server: LiveServer, uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """meta-data and network-config of the seed the domain of ``uid`` boots with."""
    domain = eventually_sync(lambda: server.plane.sim.host_named("h1").domains.get(domain_name(uid)))
    content = server.in_loop(server.plane.sim.read_volume, domain.spec.seed)
    _, files = read_seed_iso(base64.b64decode(content))
    return yaml.safe_load(files["meta-data"]), yaml.safe_load(files["network-config"])


def test_three_clones_of_a_template_each_get_their_own_disk_mac_address_and_instance_id(
    world: LiveServer,
) -> None:
    sim = world.plane.sim
    names = ["web-1", "web-2", "web-3"]
    with world.client("operator") as operator:
        tmpl = _template(operator)
        made = operator.post(
            "/v1/vms/actions/create",
            json={"names": names, "template": "tmpl", "run_policy": "AlwaysOn", "spec": {"cpu": 2}},
        )
        assert made.status_code == 201, made.text
        batch = made.json()["batch"]
        vms = [
            wait_json(operator, f"/v1/vms/{n}", lambda v: v["status"]["phase"] == "Running") for n in names
        ]
        volumes = [operator.get(f"/v1/volumes/{n}-root").json() for n in names]
        listed = operator.get("/v1/vms", params={"labelSelector": f"virtplane.io/batch={batch}"}).json()[
            "items"
        ]
        still = operator.get("/v1/vms/tmpl").json()
        template_disk = operator.get("/v1/volumes/tmpl-root").json()

    assert sorted(v["metadata"]["name"] for v in listed) == names
    assert still["status"]["phase"] == "Stopped" and still["spec"]["template"] is True
    for vm, volume in zip(vms, volumes, strict=True):
        assert vm["spec"]["disks"] == [{"volume": f"{vm['metadata']['name']}-root", "boot_order": 1}]
        assert (vm["spec"]["cpu"], vm["spec"]["memory_mib"], vm["spec"]["template"]) == (2, 1024, False)
        assert vm["metadata"]["labels"]["virtplane.io/cloned-from"] == "tmpl"
        assert volume["spec"]["source"]["volume"] == "tmpl-root"
        assert world.in_loop(sim.read_volume, volume["status"]["path"]) == "golden", "a copy of the disk"
    assert len({v["status"]["path"] for v in volumes} | {template_disk["status"]["path"]}) == 4
    macs = [vm["status"]["nics"][0]["mac"] for vm in vms]
    addresses = [vm["status"]["nics"][0]["ip"] for vm in vms]
    assert len({*macs, tmpl["status"]["nics"][0]["mac"]}) == 4
    assert len({*addresses, tmpl["status"]["nics"][0]["ip"]}) == 4
    seen_ids = set()
    for vm, mac, address in zip(vms, macs, addresses, strict=True):
        meta, network = _seed_of(world, vm["metadata"]["uid"])
        assert (
            meta["instance-id"] == vm["metadata"]["uid"] and meta["local-hostname"] == vm["metadata"]["name"]
        )
        assert meta["public-keys"] == [KEY]
        seen_ids.add(meta["instance-id"])
        assert mac in yaml.safe_dump(network) and address in yaml.safe_dump(network)
        domain = sim.host_named("h1").domains[domain_name(vm["metadata"]["uid"])]
        assert [n.mac for n in domain.spec.nics] == [mac]
    assert len(seen_ids) == 3 and tmpl["metadata"]["uid"] not in seen_ids


@pytest.mark.parametrize(
    ("body", "status", "reason", "words"),
    [
        ({"names": ["a"], "template": "nope"}, 422, "VMNotFound", "template: VM nope does not exist"),
        ({"names": ["a", "a"]}, 422, "Invalid", "a name is listed twice"),
        ({"names": ["a"], "spec": {"memory": "4Xi"}}, 422, "Invalid", "unknown unit 'Xi'"),
        ({"names": ["a"], "spec": {"cpu": 0}}, 422, "Invalid", "VM a: spec.cpu: Input should be greater than or equal to 1"),
        ({"names": ["tmpl"]}, 409, "AlreadyExists", "tmpl"),
        ({"names": ["x" * 60], "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size_gib": 1}}]}, 422, "Invalid", "no DNS label"),
        ({"names": ["a"], "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size_gib": 1, "source": {"volume": "nope"}}}]},
         422, "VolumeNotFound", "spec.source.volume: volume nope does not exist"),
    ],
)  # fmt: skip
def test_a_bad_request_is_refused_whole_and_nothing_is_made(
    world: LiveServer, body: dict[str, Any], status: int, reason: str, words: str
) -> None:
    with world.client("operator") as operator:
        _template(operator)
        before = {p: len(operator.get(f"/v1/{p}").json()["items"]) for p in ("vms", "volumes")}
        refused = operator.post("/v1/vms/actions/create", json=body)
        after = {p: len(operator.get(f"/v1/{p}").json()["items"]) for p in ("vms", "volumes")}

    assert (refused.status_code, refused.json()["reason"]) == (status, reason), refused.text
    assert words in refused.json()["message"]
    assert after == before


def test_a_running_vm_is_not_cloned_and_a_dry_run_makes_nothing(world: LiveServer) -> None:
    with world.client("operator") as operator:
        made = operator.post(
            "/v1/vms/actions/create",
            json={"names": ["live"], "run_policy": "AlwaysOn",
                  "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size_gib": 1}}]},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        wait_json(operator, "/v1/vms/live", lambda v: v["status"]["phase"] == "Running")
        refused = operator.post("/v1/vms/actions/create", json={"names": ["copy"], "template": "live"})
        as_template = operator.patch(
            "/v1/vms/live", json={"spec": {"template": True, "run_policy": "AlwaysOff"}}
        )
        dry = operator.post(
            "/v1/vms/actions/create",
            params={"dryRun": "true"},
            json={"names": ["d-1", "d-2"], "spec": {"memory": "2Gi", "nics": [{"network": "lan"}]},
                  "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size": "10G"}}]},
        )  # fmt: skip
        missing = operator.get("/v1/vms/d-1").status_code

    assert (refused.status_code, refused.json()["reason"]) == (409, "SourceNotStopped"), refused.text
    assert (as_template.status_code, as_template.json()["reason"]) == (409, "NotStopped"), as_template.text
    assert dry.status_code == 201, dry.text
    kinds = [(i["kind"], i["metadata"]["name"]) for i in dry.json()["items"]]
    assert kinds == [
        ("Volume", "d-1-root"),
        ("VirtualMachine", "d-1"),
        ("Volume", "d-2-root"),
        ("VirtualMachine", "d-2"),
    ]
    assert (
        dry.json()["items"][1]["spec"]["memory_mib"] == 2048
        and dry.json()["items"][0]["spec"]["size_gib"] == 10
    )
    assert missing == 404


def test_a_snapshot_as_a_template_gives_its_disks_as_it_saved_them(world: LiveServer) -> None:
    sim = world.plane.sim
    with world.client("operator") as operator:
        _template(operator)  # tmpl: its root disk holds the image's "golden"
        snap = {"kind": "VirtualMachineSnapshot", "metadata": {"name": "tmpl-snap"}, "spec": {"vm": "tmpl"}}
        assert operator.post("/v1/snapshots", json=snap).status_code == 201
        wait_json(operator, "/v1/snapshots/tmpl-snap", lambda s: s["status"]["phase"] == "Ready")
        root = operator.get("/v1/volumes/tmpl-root").json()
        # the template's disk changes after the snapshot: the copies must not see it
        world.in_loop(
            lambda: setattr(
                sim.storage.find_pool("", "vols").volumes.get(root["status"]["file"]), "content", "later"
            )
        )
        assert world.in_loop(sim.read_volume, root["status"]["path"]) == "later"
        made = operator.post(
            "/v1/vms/actions/create",
            json={"names": ["s-1", "s-2"], "snapshot": "tmpl-snap", "run_policy": "AlwaysOn"},
        )
        assert made.status_code == 201, made.text
        vms = [
            wait_json(operator, f"/v1/vms/{n}", lambda v: v["status"]["phase"] == "Running")
            for n in ("s-1", "s-2")
        ]
        volumes = [operator.get(f"/v1/volumes/{n}-root").json() for n in ("s-1", "s-2")]
        both = operator.post(
            "/v1/vms/actions/create", json={"names": ["x"], "snapshot": "tmpl-snap", "template": "tmpl"}
        )
        missing = operator.post("/v1/vms/actions/create", json={"names": ["x"], "snapshot": "nope"})

    for vm, volume in zip(vms, volumes, strict=True):
        assert vm["metadata"]["labels"]["virtplane.io/cloned-from"] == "tmpl-snap"
        assert vm["spec"]["memory_mib"] == 1024 and vm["spec"]["template"] is False
        assert volume["spec"]["source"] == {
            "image": None,
            "snapshot": "tmpl-snap",
            "volume": "tmpl-root",
            "backup": None,
            "linked": False,
        }
        assert world.in_loop(sim.read_volume, volume["status"]["path"]) == "golden", (
            "the disk as the snapshot saved it"
        )
    assert len({vm["status"]["nics"][0]["mac"] for vm in vms}) == 2
    assert (both.status_code, both.json()["reason"]) == (422, "Invalid")
    assert (missing.status_code, missing.json()["reason"]) == (422, "SnapshotNotFound")


def test_a_copy_runs_as_asked_never_as_the_template(world: LiveServer) -> None:
    with world.client("operator") as operator:
        _template(operator)
        made = operator.post(
            "/v1/vms/actions/create",
            params={"dryRun": "true"},
            json={"names": ["p-1", "p-2", "p-3"], "template": "tmpl"},
        )
        in_spec = operator.post(
            "/v1/vms/actions/create",
            params={"dryRun": "true"},
            json={"names": ["q-1"], "template": "tmpl", "spec": {"run_policy": "AlwaysOn"}},
        )
    policies = [i["spec"]["run_policy"] for i in made.json()["items"] if i["kind"] == "VirtualMachine"]
    assert policies == ["Manual"] * 3, "not the template's AlwaysOff"
    assert [i["spec"]["run_policy"] for i in in_spec.json()["items"] if i["kind"] == "VirtualMachine"] == [
        "AlwaysOn"
    ]


def test_a_backup_restored_as_new_vms_gives_its_disks_as_the_backup_saw_them_and_new_macs(
    world: LiveServer,
) -> None:
    sim = world.plane.sim
    target = _manifest("BackupTarget", "t", cluster="c1", path="/srv/backups", capacity_gib=100)
    with world.client("admin") as admin, world.client("operator") as operator:
        assert admin.post("/v1/backuptargets", json=target).status_code == 201
        made = operator.post(
            "/v1/vms/actions/create",
            json={"names": ["src"], "run_policy": "AlwaysOn", "spec": {"nics": [{"network": "lan"}]},
                  "volumes": [{"suffix": "root", "spec": {"pool": "vols", "size_gib": 1, "source": {"image": "disk"}}, "boot_order": 1}]},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        src = wait_json(operator, "/v1/vms/src", lambda v: v["status"]["phase"] == "Running")
        root = wait_json(operator, "/v1/volumes/src-root", lambda v: v["status"]["phase"] == "Ready")

        def write(content: str) -> None:
            world.in_loop(
                lambda: setattr(
                    sim.storage.find_pool("", "vols").volumes.get(root["status"]["file"]), "content", content
                )
            )

        for name, content in (("b1", "monday"), ("b2", "tuesday")):
            write(content)
            backup = {"metadata": {"name": name}, "spec": {"vm": "src", "target": "t"}}
            assert operator.post("/v1/backups", json=backup).status_code == 201
            done = wait_json(
                operator, f"/v1/backups/{name}", lambda b: b["status"]["phase"] in ("Succeeded", "Failed")
            )
            assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["base"] == "b1", "the second one is an incremental"
        write("wednesday")
        for new, backup_name, policy in (
            ("from-b2", "b2", "Manual"),
            ("from-b1", "b1", "AlwaysOnUnlessStoppedManually"),
        ):
            made = operator.post(
                "/v1/vms/actions/create", json={"names": [new], "backup": backup_name, "run_policy": policy}
            )
            assert made.status_code == 201, made.text
        stopped = wait_json(
            operator, "/v1/vms/from-b2", lambda v: v["status"]["phase"] == "Stopped" and v["status"]["nics"]
        )
        running = wait_json(operator, "/v1/vms/from-b1", lambda v: v["status"]["phase"] == "Running")
        volumes = [
            wait_json(operator, f"/v1/volumes/{n}-root", lambda v: v["status"]["phase"] == "Ready")
            for n in ("from-b2", "from-b1")
        ]
        missing = operator.post("/v1/vms/actions/create", json={"names": ["x"], "backup": "nope"})
        stray_pool = operator.post("/v1/vms/actions/create", json={"names": ["x"], "pool": "vols"})
    assert volumes[0]["spec"]["source"] == {
        "image": None,
        "snapshot": None,
        "volume": "src-root",
        "backup": "b2",
        "linked": False,
    }
    assert [world.in_loop(sim.read_volume, v["status"]["path"]) for v in volumes] == ["tuesday", "monday"]
    assert stopped["metadata"]["labels"]["virtplane.io/cloned-from"] == "b2"
    macs = {vm["status"]["nics"][0]["mac"] for vm in (src, stopped, running)}
    addresses = {vm["status"]["nics"][0]["ip"] for vm in (src, stopped, running)}
    assert len(macs) == 3 and len(addresses) == 3, "new MACs and addresses"
    assert (missing.status_code, missing.json()["reason"]) == (422, "BackupNotFound")
    assert (stray_pool.status_code, stray_pool.json()["reason"]) == (422, "Invalid")
