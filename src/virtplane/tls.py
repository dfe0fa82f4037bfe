"""The server's TLS: one ``ssl.SSLContext`` for the life of the listener, its certificate
reloaded in place (SIGHUP), and the rule that a non-loopback address needs TLS.

uvicorn wraps each accepted connection with the context it was given, so loading a new
chain into that same context changes what new connections see while the listening socket
and the open connections stay as they are.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import socket
import ssl
from pathlib import Path

log = logging.getLogger("virtplane.tls")

__all__ = ["ServerTls", "TlsConfigError", "fingerprint_of_pem", "is_loopback", "sha256_fingerprint"]


class TlsConfigError(Exception):
    """The certificate or key cannot be used (missing, unreadable, not a pair)."""


def sha256_fingerprint(der: bytes) -> str:
    """``AB:CD:...``: the SHA-256 of a DER certificate, as browsers and openssl print it."""
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def fingerprint_of_pem(path: Path) -> str:
    """The fingerprint of the first certificate in the PEM file ``path`` (the leaf of a chain)."""
    text = path.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
    return sha256_fingerprint(ssl.PEM_cert_to_DER_cert(text[start:end]))


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback one ('' and 0.0.0.0 are not)."""
    if host in ("", "*"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


class ServerTls:
    """The listener's context; ``reload`` loads the files again, or keeps the old pair."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load(self.context)
        self.fingerprint = fingerprint_of_pem(cert)

    def _load(self, context: ssl.SSLContext) -> None:
        for path in (self.cert, self.key):  # load_cert_chain's OSError does not say which file
            try:
                path.open("rb").close()
            except OSError as error:
                raise TlsConfigError(f"cannot read {path}: {error.strerror or error}") from None
        try:
            context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError, ValueError) as error:
            raise TlsConfigError(
                f"{self.cert} and {self.key} are not a PEM certificate and its private key ({error})"
            ) from None

    def reload(self) -> bool:
        """Load the files again; True if the new pair is served from now on. A pair that does
        not load is logged and the old one kept: a half-copied file must not take the API down."""
        try:
            # first into a scratch context: a failed load_cert_chain may leave a context half changed
            self._load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
            self._load(self.context)
            self.fingerprint = fingerprint_of_pem(self.cert)
        except (TlsConfigError, OSError, ValueError) as error:
            log.error("TLS certificate not reloaded, the previous one is still served: %s", error)
            return False
        log.info("TLS certificate reloaded from %s; SHA-256 fingerprint %s", self.cert, self.fingerprint)
        return True
