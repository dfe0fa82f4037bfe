"""What a data migration is: a numbered pure function over one stored body (see ``__init__``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from virtplane.store.sealing import Keyring

Body = dict[str, Any]

Known = Mapping[str, Sequence[Body]]
"""The bodies, by kind, of the kinds a migration may look at beside the one it rewrites
(``LOOKED_AT``: the pools and images), as they were before any migration of this run."""

LOOKED_AT = ("StoragePool", "Image")


@dataclass(frozen=True)
class DataMigration:
    version: int
    kinds: tuple[str, ...]
    upgrade: Callable[[str, Body, Known], list[str]]
    """Rewrite the body in place; one line per change, empty if it changed nothing. It must
    be idempotent: a body already in the current shape is left as it is."""
    keyed: Callable[[Keyring | None], Callable[[str, Body, Known], list[str]]] | None = None
    """For a migration that needs the secrets key: ``upgrade`` made with the store's."""

    def bound(self, keyring: Keyring | None) -> DataMigration:
        return self if self.keyed is None else replace(self, upgrade=self.keyed(keyring))
