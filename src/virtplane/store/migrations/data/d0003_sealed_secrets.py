"""3: Secrets' passwords, stored in clear by earlier releases, sealed with the secrets key.

The key is the store's (``Store(url, keyring=...)``: ``serve`` loads ``DATA_DIR/secrets.key``,
or ``--secrets-key-file``, creating it at first start, before it migrates), bound to this
migration by the runner (``DataMigration.keyed``). Without a key a plaintext password is not
left behind: the upgrade stops (``KeyNeeded``, its transaction rolled back) and says so. A
password already sealed is left as it is.

On SQLite the runner's connection turns ``secure_delete`` on for the upgrade, so that the
rewritten rows' old bytes are zeroed, not left in the file's free space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from virtplane.store.migrations.data.base import DataMigration, Known
from virtplane.store.sealing import PREFIX

if TYPE_CHECKING:
    from virtplane.store.sealing import Keyring

VERSION = 3


class KeyNeeded(Exception):
    """A plaintext password and no key to seal it with: the upgrade must not go on."""


def upgrade_with(keyring: Keyring | None) -> Callable[[str, dict[str, Any], Known], list[str]]:
    def upgrade(kind: str, body: dict[str, Any], known: Known) -> list[str]:
        del known
        spec = body.get("spec")
        password = spec.get("password") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or not isinstance(password, str) or password.startswith(PREFIX):
            return []
        if keyring is None:
            raise KeyNeeded(
                f"{kind}/{body['metadata'].get('name')} holds a password in clear and this store has "
                "no secrets key to seal it with"
            )
        spec["password"] = keyring.seal(password)
        return ["spec.password sealed with the secrets key (it was stored in clear)"]

    return upgrade


MIGRATION = DataMigration(VERSION, ("Secret",), upgrade_with(None), keyed=upgrade_with)
