"""The kinds the CLI knows, and the many ways a user may spell them."""

from __future__ import annotations

from dataclasses import dataclass

from virtplane.cli.errors import CliError

__all__ = ["EVENTS", "KINDS", "KindInfo", "complete_kind", "kind_by_name", "resolve_kind"]


@dataclass(frozen=True)
class KindInfo:
    kind: str
    """The kind name in manifests and events, e.g. ``VirtualMachine``."""
    plural: str
    """The path segment under ``/v1/``, e.g. ``vms``."""
    short: str
    """The prefix in ``vm/web-1 created``."""
    aliases: tuple[str, ...]


KINDS: tuple[KindInfo, ...] = (
    KindInfo("Host", "hosts", "host", ("host", "hosts")),
    KindInfo(
        "StoragePool", "storagepools", "storagepool", ("pool", "pools", "storagepool", "storagepools", "sp")
    ),
    KindInfo("Image", "images", "image", ("img", "imgs", "image", "images")),
    KindInfo("Network", "networks", "network", ("net", "nets", "network", "networks")),
    KindInfo("Volume", "volumes", "volume", ("vol", "vols", "volume", "volumes")),
    KindInfo("VirtualMachine", "vms", "vm", ("vm", "vms", "virtualmachine", "virtualmachines")),
    KindInfo(
        "VirtualMachineSnapshot",
        "snapshots",
        "snapshot",
        ("snap", "snaps", "snapshot", "snapshots", "virtualmachinesnapshot", "virtualmachinesnapshots"),
    ),
    KindInfo(
        "VirtualMachineOperation",
        "operations",
        "operation",
        ("op", "ops", "operation", "operations", "virtualmachineoperation", "virtualmachineoperations"),
    ),
    KindInfo("Setting", "settings", "setting", ("setting", "settings")),
    KindInfo("Secret", "secrets", "secret", ("secret", "secrets")),
    KindInfo(
        "BackupTarget",
        "backuptargets",
        "backuptarget",
        ("backuptarget", "backuptargets", "bt"),
    ),
    KindInfo(
        "BackupPolicy",
        "backuppolicies",
        "backuppolicy",
        ("backuppolicy", "backuppolicies", "bp"),
    ),
    KindInfo(
        "VirtualMachineBackup",
        "backups",
        "backup",
        ("backup", "backups", "bk", "virtualmachinebackup", "virtualmachinebackups"),
    ),
    KindInfo(
        "PlacementRule",
        "placementrules",
        "placementrule",
        ("placementrule", "placementrules", "rule", "rules", "pr"),
    ),
)

EVENTS = KindInfo("Event", "events", "event", ("ev", "event", "events"))
"""Not a resource: only listed (``get events``), never created, described or deleted."""

_BY_ALIAS: dict[str, KindInfo] = {alias: info for info in (*KINDS, EVENTS) for alias in info.aliases}
_BY_KIND: dict[str, KindInfo] = {info.kind: info for info in KINDS}


def resolve_kind(text: str, *, allow_events: bool = False) -> KindInfo:
    """Find the kind a user means by ``vm``, ``VMs``, ``VirtualMachine``, ``pool``, ...

    Raises ``CliError`` (reason ``UnknownKind``) listing what is accepted.
    """
    info = _BY_ALIAS.get(text.strip().lower())
    if info is None or (info is EVENTS and not allow_events):
        accepted = ", ".join(i.plural for i in (*KINDS, *((EVENTS,) if allow_events else ())))
        raise CliError("UnknownKind", f"unknown kind {text!r}; use one of: {accepted} (or their singulars)")
    return info


def complete_kind(incomplete: str) -> list[str]:
    """Shell completion of a KIND argument: the plurals (``vms``, ``hosts``...) it starts."""
    return [info.plural for info in (*KINDS, EVENTS) if info.plural.startswith(incomplete.lower())]


def kind_by_name(kind: str) -> KindInfo | None:
    """The kind of a manifest's ``kind:`` field (exact spelling), or None."""
    return _BY_KIND.get(kind)
