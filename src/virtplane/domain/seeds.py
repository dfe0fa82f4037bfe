"""The volumes a VM's NoCloud seeds were written to, kept on the VM (DESIGN.md §1).

A seed file is recorded on the VM before it is uploaded and struck off only after its
deletion was confirmed, so a crash at any line leaves no seed file the control plane has
forgotten: the record is the intent to delete every seed but the one the VM's domain uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from virtplane.domain.intents import SYSTEM_PREFIX

SEED_VOLUMES = f"{SYSTEM_PREFIX}seed-volumes"


@dataclass(frozen=True)
class SeedVolume:
    """A seed file by the StoragePool it is in and its name there."""

    pool: str
    file: str


def read_seed_volumes(annotations: Mapping[str, str]) -> list[SeedVolume]:
    raw = annotations.get(SEED_VOLUMES)
    if not raw:
        return []
    try:
        return [SeedVolume(str(pool), str(file)) for pool, file in json.loads(raw)]
    except (ValueError, TypeError):  # only the control plane writes it; never fail a VM over it
        return []


def write_seed_volumes(annotations: Mapping[str, str], volumes: list[SeedVolume]) -> dict[str, str]:
    """``annotations`` with the record replaced by ``volumes`` (none: no key)."""
    result = {k: v for k, v in annotations.items() if k != SEED_VOLUMES}
    if volumes:
        result[SEED_VOLUMES] = json.dumps([[v.pool, v.file] for v in volumes])
    return result


__all__ = ["SEED_VOLUMES", "SeedVolume", "read_seed_volumes", "write_seed_volumes"]
