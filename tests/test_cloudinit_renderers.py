"""The seed's network-config gives every guest its default route, whichever renderer its
cloud-init uses: ifupdown's (ENI: images without netplan) and netplan's.

What each needs, as a table over our documents: the default route is the NIC's gateway4
(gateway6), never a route to 0.0.0.0/0 (::/0), which the ENI renderer writes as
`post-up route add default gw ...` (net-tools, absent from such images), and declared once
(netplan refuses two default routes). Then the same documents through cloud-init's own
renderers (Debian's package, unpacked by scripts/cloudinit/fetch.sh; skipped without it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from virtplane.domain.cloudinit import SeedNic, seed_documents

REPO = Path(__file__).resolve().parents[1]
CLOUDINIT = Path(os.environ.get("VIRTPLANE_CLOUDINIT_DIR", REPO / ".work" / "cloud-init"))
MODULES = CLOUDINIT / "usr" / "lib" / "python3" / "dist-packages"
MAC = "52:54:00:00:00:01"

NICS: dict[str, tuple[SeedNic, str | None]] = {  # a NIC, and the default gateway its guest must get
    "static-v4": (SeedNic(MAC, "10.1.0.2", 24, "10.1.0.1", ("10.1.0.53",)), "10.1.0.1"),
    "static-v6": (SeedNic(MAC, "fd00::2", 64, "fd00::1"), "fd00::1"),
    "static-no-gateway": (SeedNic(MAC, "10.1.0.2", 24), None),
    "dhcp": (SeedNic(MAC), None),
}


def network(nic: SeedNic) -> dict[str, Any]:
    docs = seed_documents(instance_id="u", hostname="h", user_data="", ssh_authorized_keys=[], nics=[nic])
    config: dict[str, Any] = json.loads(docs["network-config"])
    return config


@pytest.mark.parametrize("kind", sorted(NICS))
def test_the_default_route_is_the_gateway_key_and_declared_once(kind: str) -> None:
    nic, gateway = NICS[kind]
    entry = network(nic)["ethernets"]["nic0"]
    default_routes = [r for r in entry.get("routes", []) if r.get("to") in ("0.0.0.0/0", "::/0", "default")]
    assert default_routes == [], "ENI would render it with net-tools' route"
    gateways = [entry[key] for key in ("gateway4", "gateway6") if key in entry]
    assert gateways == ([gateway] if gateway else []), entry


RENDER = """
import json, os, sys, tempfile
from cloudinit.net import eni, netplan, network_state
state = network_state.parse_net_config_data(json.loads(sys.argv[1]))
out = tempfile.mkdtemp()
netplan.Renderer({"netplan_path": "50-cloud-init.yaml", "postcmds": False}).render_network_state(state, target=out)
print(json.dumps({
    "eni": eni.Renderer({"eni_header": ""})._render_interfaces(state),
    "netplan": open(os.path.join(out, "50-cloud-init.yaml")).read(),
}))
"""


def rendered(nic: SeedNic) -> dict[str, str]:
    if not (MODULES / "cloudinit").is_dir():
        if os.environ.get("VIRTPLANE_CLOUDINIT_REQUIRED") == "1":
            pytest.fail(f"no cloud-init under {CLOUDINIT} (run scripts/cloudinit/fetch.sh)")
        pytest.skip(f"no cloud-init under {CLOUDINIT} (run scripts/cloudinit/fetch.sh)")
    out = subprocess.run(
        [sys.executable, "-c", RENDER, json.dumps(network(nic))],
        env={**os.environ, "PYTHONPATH": str(MODULES)},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("kind", sorted(NICS))
def test_cloud_inits_own_renderers_give_the_default_route_without_net_tools(kind: str) -> None:
    nic, gateway = NICS[kind]
    files = rendered(nic)
    eni_lines = [line.strip() for line in files["eni"].splitlines()]
    assert not any("route add" in line for line in eni_lines), files["eni"]  # net-tools
    assert (f"gateway {gateway}" in eni_lines) == (gateway is not None), files["eni"]  # ifupdown's own
    netplan_defaults = files["netplan"].count("gateway4:") + files["netplan"].count("gateway6:")
    netplan_defaults += files["netplan"].count("to: 0.0.0.0/0") + files["netplan"].count("to: ::/0")
    assert netplan_defaults == (1 if gateway else 0), files["netplan"]
