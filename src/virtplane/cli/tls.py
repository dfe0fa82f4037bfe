"""How the CLI trusts the server's certificate: the system's CAs, a CA file
(``--ca-file``), or one pinned certificate (``--tls-fingerprint``, SHA-256 as ``serve``
prints it at start).

A pin is checked inside the TLS handshake (``PinnedSocket.do_handshake``), before the
request and its token leave: a check on the response would come after the token was sent.
"""

from __future__ import annotations

import hashlib
import re
import ssl
from pathlib import Path

import typer

from virtplane.cli.errors import CliError

__all__ = [
    "CertificateNotTrusted",
    "FingerprintMismatch",
    "client_context",
    "normalize_fingerprint",
    "untrusted_from",
]

HINT = (
    "Give the CA that signed the server's certificate with --ca-file or VIRTPLANE_CA_FILE, or pin "
    "the certificate's SHA-256 fingerprint (`virtplane serve` prints it at start) with "
    "--tls-fingerprint or VIRTPLANE_TLS_FINGERPRINT."
)


def pretty(fingerprint_hex: str) -> str:
    return ":".join(fingerprint_hex[i : i + 2] for i in range(0, len(fingerprint_hex), 2)).upper()


def normalize_fingerprint(
    ctx: typer.Context | None, param: typer.CallbackParam | None, value: str | None
) -> str | None:
    """``AB:CD:...``, ``abcd...`` or ``sha256:...`` to 64 lowercase hex digits (a callback of the option)."""
    if value is None or not value.strip():
        return None
    digits = re.sub(r"[\s:]", "", value.strip().lower().removeprefix("sha256:").removeprefix("sha256/"))
    if not re.fullmatch(r"[0-9a-f]{64}", digits):
        raise typer.BadParameter(
            "a SHA-256 fingerprint is 32 bytes in hex, e.g. 'AB:CD:...' as `virtplane serve` prints it"
        )
    return digits


class FingerprintMismatch(ssl.SSLCertVerificationError):
    """The server's certificate is not the pinned one."""

    def __init__(self, seen: str, pinned: str) -> None:
        super().__init__(
            f"the certificate's SHA-256 fingerprint is {pretty(seen)}, not the pinned {pretty(pinned)}"
        )
        self.seen = seen
        self.pinned = pinned


class PinnedSocket(ssl.SSLSocket):
    """An ``SSLSocket`` whose handshake fails unless the peer's certificate is the pinned one."""

    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        pinned = getattr(self.context, "pinned_sha256", None)
        der = self.getpeercert(binary_form=True)
        seen = hashlib.sha256(der or b"").hexdigest()
        if pinned is not None and seen != pinned:
            raise FingerprintMismatch(seen, pinned)


class PinnedContext(ssl.SSLContext):
    pinned_sha256: str


def client_context(ca_file: Path | None, fingerprint: str | None) -> ssl.SSLContext:
    """The context to verify the server with: the pin if given (it replaces CA trust: a pinned
    self-signed certificate needs none), else the CA file, else the system's CAs."""
    if fingerprint is not None:
        pinned = PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
        pinned.check_hostname = False
        pinned.verify_mode = ssl.CERT_NONE  # the fingerprint is checked instead, in the handshake
        pinned.pinned_sha256 = fingerprint
        pinned.sslsocket_class = PinnedSocket
        return pinned
    if ca_file is not None:
        try:
            return ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as error:
            raise CliError(
                "InvalidCAFile", f"cannot use {ca_file} as a CA file (PEM certificates): {error}"
            ) from None
    return ssl.create_default_context()


class CertificateNotTrusted(CliError):
    """The server's certificate is not the pinned one, or no trusted CA signed it, or a pin was
    given for a plain URL."""

    def __init__(self, message: str) -> None:
        super().__init__("CertificateNotTrusted", message)

    @classmethod
    def mismatch(cls, url: str, detail: str) -> CertificateNotTrusted:
        return cls(
            f"the server at {url} is not the one pinned: {detail}. Either someone is in between, "
            "or its certificate was replaced: compare with the fingerprint `virtplane serve` "
            "printed at start, and pin the new one with --tls-fingerprint if it is yours."
        )

    @classmethod
    def unknown_ca(cls, url: str, detail: str) -> CertificateNotTrusted:
        return cls(f"the server's certificate at {url} is not trusted ({detail}). {HINT}")


def untrusted_from(error: BaseException, url: str) -> CertificateNotTrusted | None:
    """The ``CertificateNotTrusted`` behind a connection error (its causes searched), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, FingerprintMismatch):
            return CertificateNotTrusted.mismatch(url, str(current.args[0]))
        if isinstance(current, ssl.SSLCertVerificationError):
            return CertificateNotTrusted.unknown_ca(url, current.verify_message or str(current))
        current = current.__cause__ or current.__context__
    return None
