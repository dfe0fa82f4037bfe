"""``virtplane vm create / clone / template`` against the real app: what people type most, the
manifests of a dry run, a shared pool chosen (never a host's local one), --count in one request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import LiveServer, wait_json
from virtplane.cli.exit_codes import ExitCode
from virtplane.cli.vm_create import choose_pool
from virtplane.domain.resources import VirtualMachine, Volume

from .conftest import Invoke, RecordingTransport

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0ZXN0a2V5 me@laptop"


@pytest.fixture
def world(server: LiveServer) -> LiveServer:
    """A host with br0, its local pool (first by name), a shared pool, a library with an image, lan."""
    server.plane.sim.put_image_file("lib", "disk.qcow2", "golden", size_gib=2)
    server.plane.sim.add_host("h1", 16, 16384, ["br0"])
    docs: list[tuple[str, dict[str, Any]]] = [
        ("hosts", {"metadata": {"name": "h1"}, "spec": {"uri": "sim://h1", "cluster": "c1"}}),
        ("storagepools", {"metadata": {"name": "a-local"}, "spec": {"kind": "local", "host": "h1", "capacity_gib": 50}}),
        ("storagepools", {"metadata": {"name": "shared"}, "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": "1Ti"}}),
        ("storagepools", {"metadata": {"name": "lib"}, "spec": {"kind": "shared", "cluster": "c1", "capacity_gib": 10, "content": "images"}}),
        ("images", {"metadata": {"name": "debian-12"}, "spec": {"pool": "lib", "file": "disk.qcow2", "kind": "Disk"}}),
        ("networks", {"metadata": {"name": "lan"}, "spec": {"kind": "bridge", "bridge": "br0", "cluster": "c1", "subnet": "10.1.0.0/24"}}),
    ]  # fmt: skip
    with server.client("admin") as admin:
        for plural, doc in docs:
            created = admin.post(f"/v1/{plural}", json=doc)
            assert created.status_code == 201, created.text
        wait_json(admin, "/v1/images/debian-12", lambda i: i["status"]["phase"] == "Ready")
    return server


def test_a_dry_run_prints_the_manifests_apply_takes_and_writes_nothing(
    invoke: Invoke, world: LiveServer, sent: RecordingTransport, tmp_path: Path
) -> None:
    user_data = tmp_path / "user-data"
    user_data.write_text("#cloud-config\nruncmd: [[touch, /made]]\n")

    result = invoke(
        "vm", "create", "web-1", "--image", "debian-12", "--size", "20Gi", "--cpu", "2", "--memory", "4Gi",
        "--network", "lan", "--ssh-key", KEY, "--user-data", str(user_data), "--label", "app=web",
        "--dry-run", "-o", "yaml",
    )  # fmt: skip

    assert result.exit_code == ExitCode.OK, result.output
    volume, vm = yaml.safe_load_all(result.stdout)
    assert volume["kind"] == "Volume" and volume["metadata"]["name"] == "web-1-root"
    assert volume["spec"]["pool"] == "shared", "the shared pool, not the host's local one first by name"
    assert (volume["spec"]["size_gib"], volume["spec"]["source"]["image"]) == (20, "debian-12")
    assert vm["kind"] == "VirtualMachine" and vm["metadata"]["labels"]["app"] == "web"
    assert (vm["spec"]["cpu"], vm["spec"]["memory_mib"], vm["spec"]["run_policy"]) == (2, 4096, "Manual")
    assert vm["spec"]["disks"] == [{"volume": "web-1-root", "boot_order": 1}]
    assert vm["spec"]["nics"][0]["network"] == "lan"
    assert vm["spec"]["cloud_init"]["ssh_authorized_keys"] == [KEY]
    assert vm["spec"]["cloud_init"]["user_data"] == user_data.read_text()
    assert "status" not in vm and "uid" not in vm["metadata"]
    assert [r.params for r in sent.to("POST", "/v1/vms/actions/create")] == [{"dryRun": "true"}]
    assert (
        world.store.find(VirtualMachine, "web-1") is None and world.store.find(Volume, "web-1-root") is None
    )
    manifest = tmp_path / "web-1.yaml"
    manifest.write_text(result.stdout)
    applied = invoke("apply", "-f", str(manifest))
    assert applied.exit_code == ExitCode.OK, applied.output
    assert world.store.get(VirtualMachine, "web-1").spec.memory_mib == 4096


def test_count_makes_them_in_one_request_and_start_runs_them(
    invoke: Invoke, world: LiveServer, sent: RecordingTransport
) -> None:
    result = invoke(
        "vm", "create", "web", "--image", "debian-12", "--network", "lan", "--count", "3", "--start"
    )

    assert result.exit_code == ExitCode.OK, result.output
    assert len(sent.to("POST", "/v1/vms/actions/create")) == 1
    for n in ("web-1", "web-2", "web-3"):
        assert f"vm/{n} created" in result.stdout and f"volume/{n}-root created" in result.stdout
    with world.client("operator") as operator:
        vms = [
            wait_json(operator, f"/v1/vms/web-{i}", lambda v: v["status"]["phase"] == "Running")
            for i in (1, 2, 3)
        ]
    assert {vm["spec"]["run_policy"] for vm in vms} == {"AlwaysOnUnlessStoppedManually"}
    assert world.store.get(Volume, "web-2-root").spec.size_gib == 10, "the default root size"


def test_a_template_and_its_clones_from_the_cli(invoke: Invoke, world: LiveServer) -> None:
    made = invoke("vm", "create", "golden", "--image", "debian-12", "--network", "lan")
    assert made.exit_code == ExitCode.OK, made.output
    with world.client("operator") as operator:
        wait_json(operator, "/v1/vms/golden", lambda v: v["status"]["phase"] == "Stopped")
        wait_json(operator, "/v1/volumes/golden-root", lambda v: v["status"]["phase"] == "Ready")

    templated = invoke("vm", "template", "golden")
    from_template = invoke("vm", "create", "app", "--template", "golden", "--count", "2", "--memory", "1Gi")
    cloned = invoke("vm", "clone", "golden", "app-3")
    linked = invoke("vm", "clone", "golden", "thin-1", "--linked")
    linked_too = invoke("vm", "create", "thin-2", "--template", "golden", "--linked")
    mixed = invoke("vm", "create", "x", "--template", "golden", "--image", "debian-12")
    bad_memory = invoke("vm", "create", "x", "--memory", "4Xi")

    assert templated.exit_code == ExitCode.OK and "is a template" in templated.stdout, templated.output
    assert from_template.exit_code == ExitCode.OK, from_template.output
    assert cloned.exit_code == ExitCode.OK, cloned.output
    for name in ("app-1", "app-2", "app-3"):
        vm = world.store.get(VirtualMachine, name)
        assert vm.metadata.labels["virtplane.io/cloned-from"] == "golden"
        assert world.store.get(Volume, f"{name}-root").spec.source.volume == "golden-root"  # type: ignore[union-attr]
    assert world.store.get(VirtualMachine, "app-1").spec.memory_mib == 1024
    assert linked.exit_code == ExitCode.OK and linked_too.exit_code == ExitCode.OK, (
        linked.output + linked_too.output
    )
    for name in ("thin-1", "thin-2"):
        assert world.store.get(Volume, f"{name}-root").spec.source.linked  # type: ignore[union-attr]
    assert not world.store.get(Volume, "app-3-root").spec.source.linked  # type: ignore[union-attr]
    assert mixed.exit_code == ExitCode.USAGE and "copied as they are" in mixed.output
    assert bad_memory.exit_code == ExitCode.USAGE and "unknown unit 'Xi'" in bad_memory.output


@pytest.mark.parametrize(
    ("pools", "chosen"),
    [
        ([], None),
        ([{"metadata": {"name": "l"}, "spec": {"kind": "local", "host": "h1"}}], None),  # never pins a VM
        ([{"metadata": {"name": "lib"}, "spec": {"kind": "shared", "content": "images"}}], None),
        (
            [
                {
                    "metadata": {"name": "a"},
                    "spec": {"kind": "shared"},
                    "status": {"reachable_hosts": ["h1"]},
                },
                {
                    "metadata": {"name": "b"},
                    "spec": {"kind": "shared"},
                    "status": {"reachable_hosts": ["h1", "h2"]},
                },
                {
                    "metadata": {"name": "c"},
                    "spec": {"kind": "shared"},
                    "status": {"reachable_hosts": ["h1", "h2"]},
                },
            ],
            "b",
        ),
    ],
)
def test_the_pool_chosen_for_new_disks(pools: list[dict[str, Any]], chosen: str | None) -> None:
    assert choose_pool(pools) == chosen


def test_no_shared_pool_is_an_error_that_says_what_to_do(invoke: Invoke, server: LiveServer) -> None:
    result = invoke("vm", "create", "web-1", "--size", "5Gi")
    assert result.exit_code == ExitCode.FAILED
    assert "no shared volume pool" in result.stderr and "--pool" in result.stderr


def test_a_vm_from_a_snapshot(invoke: Invoke, world: LiveServer) -> None:
    made = invoke("vm", "create", "src", "--image", "debian-12", "--network", "lan", "--memory", "768Mi")
    assert made.exit_code == ExitCode.OK, made.output
    with world.client("operator") as operator:
        wait_json(operator, "/v1/vms/src", lambda v: v["status"]["phase"] == "Stopped")
        wait_json(operator, "/v1/volumes/src-root", lambda v: v["status"]["phase"] == "Ready")
    snapped = invoke("snapshot", "create", "src", "--name", "src-snap", "--wait")
    assert snapped.exit_code == ExitCode.OK, snapped.output

    result = invoke("vm", "create", "restored", "--snapshot", "src-snap", "--dry-run", "-o", "yaml")
    both = invoke("vm", "create", "x", "--snapshot", "src-snap", "--template", "src")

    assert result.exit_code == ExitCode.OK, result.output
    volume, vm = yaml.safe_load_all(result.stdout)
    assert volume["spec"]["source"] == {
        "image": None,
        "snapshot": "src-snap",
        "volume": "src-root",
        "backup": None,
        "linked": False,
    }
    assert (
        vm["spec"]["memory_mib"] == 768 and vm["metadata"]["labels"]["virtplane.io/cloned-from"] == "src-snap"
    )
    assert both.exit_code == ExitCode.USAGE and "not both" in both.output
