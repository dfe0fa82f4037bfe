"""Secrets at rest: a Secret's password is stored sealed (Fernet: AES-128-CBC with an
HMAC-SHA256, authenticated) with a key kept outside the database.

The key file (``DATA_DIR/secrets.key`` unless ``serve --secrets-key-file``) holds Fernet
keys, one a line, the newest first: it seals with the first and opens with any, so a
rotation (``rotate_key``) can re-seal every Secret while the old key is still there to
open them. It is created 0600 at first start (``os.open`` with the mode: never readable
by others, not even for an instant).

The store seals every Secret it writes (``seal_secret_doc``, from ``creates`` and
``writes``), so the objects it returns, the cache and the change feed hold only the sealed
form; the fencing controller opens it when it talks to the BMC (``open_secret``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from virtplane.domain.resources import Secret

__all__ = ["PREFIX", "Keyring", "SecretsKeyError", "open_secret", "seal_secret_doc", "write_key_file"]

log = logging.getLogger("virtplane.store.sealing")

PREFIX = "vp-sealed:v1:"
"""What a sealed password starts with: the migration tells a plaintext one from it."""


class SecretsKeyError(Exception):
    """The key file is missing or unreadable, or a sealed password does not open with it."""


def write_key_file(path: Path, keys: list[bytes]) -> None:
    """``keys`` into ``path``, atomically, 0600 from the start."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(b"".join(key + b"\n" for key in keys))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


class Keyring:
    """The Fernet keys of a key file, newest first."""

    def __init__(self, keys: list[bytes], path: Path | None = None) -> None:
        if not keys:
            raise SecretsKeyError(f"{path or 'the key file'} holds no key")
        try:
            self._fernet = MultiFernet([Fernet(key) for key in keys])
        except ValueError as error:  # not 32 url-safe base64-encoded bytes
            raise SecretsKeyError(f"{path or 'a key'} is not a Fernet key file: {error}") from None
        self.keys = list(keys)
        self.path = path

    @classmethod
    def load(cls, path: Path) -> Keyring:
        try:
            text = path.read_bytes()
        except OSError as error:
            raise SecretsKeyError(f"cannot read the secrets key {path}: {error.strerror or error}") from None
        if os.stat(path).st_mode & 0o077:
            log.warning("the secrets key %s is readable by others than its owner: chmod 0600 it", path)
        keys = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(b"#")]
        return cls(keys, path)

    @classmethod
    def load_or_create(cls, path: Path) -> Keyring:
        """The key file at ``path``; a new one with one fresh key if there is none."""
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_key_file(path, [Fernet.generate_key()])
            log.info("created the secrets key %s (keep it with the database's backups, apart)", path)
        return cls.load(path)

    def seal(self, plaintext: str) -> str:
        return PREFIX + self._fernet.encrypt(plaintext.encode()).decode()

    def open(self, sealed: str) -> str:
        if not sealed.startswith(PREFIX):
            raise SecretsKeyError("not a sealed password")
        try:
            return self._fernet.decrypt(sealed.removeprefix(PREFIX).encode()).decode()
        except InvalidToken:
            where = f" in {self.path}" if self.path else ""
            raise SecretsKeyError(
                f"the password was sealed with a key that is not{where} (was the key file replaced "
                "or lost? restore it from where you keep it apart from the database)"
            ) from None

    def can_open(self, value: str) -> bool:
        try:
            self.open(value)
        except SecretsKeyError:
            return False
        return True

    def reseal(self, sealed: str) -> str:
        """``sealed`` sealed again with the newest key (it must open with one of them)."""
        return PREFIX + self._fernet.rotate(sealed.removeprefix(PREFIX).encode()).decode()


def seal_secret_doc(
    keyring: Keyring | None, kind: str, doc: dict[str, Any], stored: dict[str, Any] | None
) -> None:
    """Seal a Secret's ``spec.password`` in ``doc`` (a JSON dump) before it is written; the
    stored sealed value is kept when the password is the same (a write that changes nothing)."""
    if kind != Secret.KIND:
        return
    spec = doc.get("spec") or {}
    password = spec.get("password")
    if not isinstance(password, str):
        return
    if keyring is None:
        raise SecretsKeyError("this store has no secrets key: it cannot write a Secret's password")
    if keyring.can_open(password):
        return
    before = ((stored or {}).get("spec") or {}).get("password")
    if isinstance(before, str) and keyring.can_open(before) and keyring.open(before) == password:
        spec["password"] = before
        return
    spec["password"] = keyring.seal(password)


def open_secret(keyring: Keyring | None, secret: Secret) -> Secret:
    """A copy of ``secret`` with its password in clear, for the BMC client."""
    password = secret.spec.password
    if password is None:
        return secret
    if keyring is None:
        raise SecretsKeyError(f"no secrets key to open secret {secret.metadata.name}")
    try:
        opened = keyring.open(password)
    except SecretsKeyError as error:
        raise SecretsKeyError(f"secret {secret.metadata.name}: {error}") from None
    return secret.model_copy(update={"spec": secret.spec.model_copy(update={"password": opened})})
