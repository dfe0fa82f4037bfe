"""The NoCloud seed: its documents and the cidata ISO, read back with pycdlib."""

from __future__ import annotations

import json

import yaml

from virtplane.domain.cloudinit import SeedNic, seed_digest, seed_documents
from virtplane.seed_iso import build_seed_iso, read_seed_iso

NICS = [
    SeedNic(
        mac="52:54:00:00:00:01",
        ip="10.1.0.2",
        prefix_length=24,
        gateway="10.1.0.1",
        dns_servers=("10.1.0.53",),
    ),
    SeedNic(mac="52:54:00:00:00:02"),
]


def documents(**changes: object) -> dict[str, bytes]:
    args: dict[str, object] = {
        "instance_id": "uid-1",
        "hostname": "web-1",
        "user_data": "#cloud-config\nruncmd: [[touch, /ok]]\n",
        "ssh_authorized_keys": ["ssh-ed25519 AAAA key@x"],
        "nics": NICS,
    }
    return seed_documents(**{**args, **changes})  # type: ignore[arg-type]


def test_the_iso_is_cidata_with_the_three_documents() -> None:
    label, files = read_seed_iso(build_seed_iso(documents()))
    assert label == "cidata"
    assert sorted(files) == ["meta-data", "network-config", "user-data"]
    meta = yaml.safe_load(files["meta-data"])
    assert meta == {
        "instance-id": "uid-1",
        "local-hostname": "web-1",
        "public-keys": ["ssh-ed25519 AAAA key@x"],
    }
    assert files["user-data"] == b"#cloud-config\nruncmd: [[touch, /ok]]\n"  # as given, never rewritten
    network = yaml.safe_load(files["network-config"])
    assert network["version"] == 2
    assert network["ethernets"]["nic0"] == {
        "match": {"macaddress": "52:54:00:00:00:01"},
        "set-name": "eth0",
        "addresses": ["10.1.0.2/24"],
        "gateway4": "10.1.0.1",
        "nameservers": {"addresses": ["10.1.0.53"]},
    }
    assert network["ethernets"]["nic1"]["dhcp4"] is True


def test_a_network_config_given_replaces_the_generated_one() -> None:
    mine = {"version": 2, "ethernets": {"x": {"dhcp4": True}}}
    assert json.loads(documents(network_override=mine)["network-config"]) == mine


def test_the_digest_follows_the_content() -> None:
    assert seed_digest(documents()) == seed_digest(documents())
    assert seed_digest(documents()) != seed_digest(documents(hostname="web-2"))
    assert seed_digest(documents()) != seed_digest(documents(nics=NICS[:1]))


def test_a_vms_seed_follows_its_spec_and_its_networks() -> None:
    from virtplane.controllers.seed import vm_seed
    from virtplane.domain.networks import Network
    from virtplane.domain.resources import VirtualMachine

    lan = Network.model_validate(
        {
            "metadata": {"name": "lan"},
            "spec": {
                "kind": "bridge",
                "bridge": "br0",
                "cluster": "c1",
                "subnet": "10.1.0.0/24",
                "gateway": "10.1.0.1",
                "dns_servers": ["10.1.0.53"],
            },
        }
    )
    doc = {
        "metadata": {"name": "web-1", "uid": "uid-7"},
        "spec": {
            "nics": [{"network": "lan", "mac": "52:54:00:00:00:09", "ip": "10.1.0.9"}],
            "cloud_init": {"user_data": "#cloud-config\n", "ssh_authorized_keys": ["ssh-ed25519 K"]},
        },
    }
    vm = VirtualMachine.model_validate(doc)
    assert vm_seed(VirtualMachine.model_validate({"metadata": {"name": "x"}}), {}) is None
    seed = vm_seed(vm, {"lan": lan})
    assert seed is not None and seed.file_name == f"vp-seed-{seed.digest}.iso"
    label, files = read_seed_iso(seed.iso())
    assert label == "cidata"
    meta = yaml.safe_load(files["meta-data"])
    assert (meta["instance-id"], meta["local-hostname"], meta["public-keys"]) == (
        "uid-7",
        "web-1",
        ["ssh-ed25519 K"],
    )
    nic = yaml.safe_load(files["network-config"])["ethernets"]["nic0"]
    assert nic["addresses"] == ["10.1.0.9/24"] and nic["nameservers"] == {"addresses": ["10.1.0.53"]}
    # rebuilt when the spec changes: another digest, another file
    doc["spec"]["cloud_init"]["user_data"] = "#cloud-config\nhostname: other\n"
    changed = vm_seed(VirtualMachine.model_validate(doc), {"lan": lan})
    assert changed is not None and changed.file_name != seed.file_name
