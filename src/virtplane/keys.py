"""``virtplane secrets rotate-key``: a new secrets key, every Secret sealed again with it.

The steps keep every Secret readable whatever moment a crash comes at: the new key is
written first beside the old one (the file opens with either), then every Secret is
sealed again in one transaction, and only then is the old key dropped from the file.
The server must be stopped: it holds the key it started with (the data directory's
lock says whether one runs; PostgreSQL replicas: stop them all, and copy the new key
file to each).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet

from virtplane.runtime.datadir import DataDirBusy, DataDirLock
from virtplane.store.sealing import Keyring, write_key_file
from virtplane.store.store import Store, sqlite_url
from virtplane.store.upgrade import NewerData

__all__ = ["RotateRefused", "rotate_key"]


class RotateRefused(Exception):
    """Nothing was changed: a server runs, or there is no key or no database."""


def rotate_key(data_dir: Path, db_url: str | None = None, key_file: Path | None = None) -> int:
    """Rotate the key; how many Secrets were sealed again."""
    path = key_file or data_dir / "secrets.key"
    url = db_url or sqlite_url(data_dir / "virtplane.db")
    if db_url is None and not (data_dir / "virtplane.db").is_file():
        raise RotateRefused(
            f"no database in {data_dir} (give the server's --data-dir, and --db if it has one)"
        )
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except DataDirBusy as busy:
        raise RotateRefused(f"{busy}: stop it first (it keeps the key it started with)") from None
    try:
        old = Keyring.load(path)
        new_key = Fernet.generate_key()
        both = Keyring([new_key, *old.keys], path)
        store = Store(url, keyring=both)
        try:
            if store.schema_revision() is None:
                raise RotateRefused(f"no virtplane database at {url}")
            try:  # before the key file changes: its Secrets may be in a shape this release does not know
                store.refuse_newer_data()
            except NewerData as newer:
                raise RotateRefused(str(newer)) from None
            write_key_file(path, both.keys)  # the old key stays until every Secret is sealed again
            count = store.reseal_secrets(both)
        finally:
            store.close()
        write_key_file(path, [new_key])
        return count
    finally:
        lock.release()
