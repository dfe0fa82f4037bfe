"""The Linux bridges of a libvirt host, from libvirt's node interfaces (``virInterface``).

libvirt's interface driver (its udev backend on Debian, or the test driver's own list)
reports the host's active interfaces through the connection, so a remote host reports
its own. A bridge is ``<interface type='bridge'>``; its ports are inside ``<bridge>``, a
VLAN port as ``<interface type='vlan'><vlan tag='N'>``.

A NIC's VLAN is never tagged by us: libvirt's ``<vlan>`` works with Open vSwitch,
macvtap and hostdev only, and a Linux bridge's port VLANs can only be set on the host
itself. So a VLAN network names a bridge that carries the VLAN, one whose port is that
VLAN's interface (as ``br100`` over ``eth0.100``), and a domain is not defined on a bridge
that does not (docs/decisions.md).

All functions block and take an open virConnect.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from virtplane.drivers.base import DomainSpec
from virtplane.drivers.errors import PermanentError
from virtplane.drivers.libvirt import _libvirt

Bridges = dict[str, frozenset[int]]
"""Each bridge's name and the VLAN tags of its VLAN ports."""


def parse_bridge(xml: str) -> tuple[str, frozenset[int]] | None:
    """(name, VLAN tags of its ports) of a bridge's interface XML; None for any other interface."""
    root = ET.fromstring(xml)
    if root.get("type") != "bridge" or not root.get("name"):
        return None
    tags = (vlan.get("tag", "") for vlan in root.iterfind("bridge/interface/vlan"))
    return root.get("name", ""), frozenset(int(tag) for tag in tags if tag.isdigit())


def host_bridges(conn: Any) -> Bridges:
    """The host's active bridges; none where libvirt has no interface driver."""
    lv = _libvirt.load()
    try:
        interfaces = conn.listAllInterfaces(lv.VIR_CONNECT_LIST_INTERFACES_ACTIVE)
    except lv.libvirtError as exc:
        if _libvirt.error_code(exc) in (lv.VIR_ERR_NO_SUPPORT, lv.VIR_ERR_NO_INTERFACE):
            return {}
        raise
    bridges: Bridges = {}
    for interface in interfaces:
        try:
            parsed = parse_bridge(interface.XMLDesc(0))
        except lv.libvirtError as exc:  # it went away since the listing
            if _libvirt.error_code(exc) != lv.VIR_ERR_NO_INTERFACE:
                raise
            continue
        if parsed is not None:
            bridges[parsed[0]] = parsed[1]
    return bridges


def check_vlans(spec: DomainSpec, bridges: Bridges) -> None:
    """Refuse a NIC whose VLAN its bridge does not carry, rather than attach it untagged."""
    for nic in spec.nics:
        if nic.vlan is None or nic.bridge is None:
            continue
        if nic.bridge not in bridges:
            raise PermanentError(f"network {nic.network}: bridge {nic.bridge} is not on this host")
        if nic.vlan not in bridges[nic.bridge]:
            raise PermanentError(
                f"network {nic.network}: bridge {nic.bridge} does not carry VLAN {nic.vlan} (no port "
                f"of it is that VLAN's interface); virtplane does not tag the ports of a Linux bridge: "
                f"give the VLAN a bridge of its own over the VLAN interface"
            )


__all__ = ["Bridges", "check_vlans", "host_bridges", "parse_bridge"]
