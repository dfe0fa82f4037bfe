"""A real OpenLDAP ``slapd`` for the tests: its own config and database in a temporary
directory, on 127.0.0.1 and a free port, with the users and groups of ``PEOPLE``.

The DNs are those of the operator guide's ``[identity]`` example, so that the tests log in
with the guide's configuration (only its URL changed).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

BASE = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{BASE}"
ROOT_PASSWORD = "root-secret"
SCHEMA = Path("/etc/ldap/schema")
MODULES = Path("/usr/lib/ldap")

PEOPLE = {
    # uid: (password, groups)
    "alice": ("alice-pw", ("virtplane-operators", "staff")),
    "bob": ("bob-pw", ("virtplane-viewers",)),
    "carol": ("carol-pw", ("virtplane-viewers", "virtplane-admins")),
    "dave": ("dave-pw", ("staff",)),
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _ldif() -> str:
    entries = [
        f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: example\ndc: example\n",
        f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for uid, (password, _) in PEOPLE.items():
        entries.append(
            f"dn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
            f"cn: {uid.title()}\nsn: {uid.title()}\nuserPassword: {password}\n"
        )
    groups = sorted({g for _, gs in PEOPLE.values() for g in gs})
    for group in groups:
        members = "".join(
            f"member: uid={uid},ou=people,{BASE}\n" for uid, (_, gs) in PEOPLE.items() if group in gs
        )
        entries.append(f"dn: cn={group},ou=groups,{BASE}\nobjectClass: groupOfNames\ncn: {group}\n{members}")
    return "\n".join(entries)


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(a CA's certificate, a server certificate for 127.0.0.1 it signed, that one's key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)

    def certificate(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("virtplane test CA", ca_key, "virtplane test CA", ca_key, ca=True)
    server = certificate("127.0.0.1", server_key, "virtplane test CA", ca_key, ca=False)
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def _config(directory: Path, tls: tuple[Path, Path, Path] | None) -> str:
    schemas = "".join(f"include {SCHEMA / name}.schema\n" for name in ("core", "cosine", "inetorgperson"))
    certificates = f"TLSCertificateFile {tls[1]}\nTLSCertificateKeyFile {tls[2]}\n" if tls else ""
    return (
        f"{schemas}{certificates}modulepath {MODULES}\nmoduleload back_mdb\npidfile {directory / 'slapd.pid'}\n"
        # passwords are for binding only; everything else may be read by a bound user
        "access to attrs=userPassword by anonymous auth by * none\n"
        "access to * by users read by * none\n"
        f'database mdb\nmaxsize 10485760\nsuffix "{BASE}"\nrootdn "{ROOT_DN}"\n'
        f"rootpw {ROOT_PASSWORD}\ndirectory {directory / 'db'}\n"
    )


@dataclass
class Slapd:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    ldaps_url: str | None = None
    ca_file: Path | None = None
    """With TLS: the CA that signed the server's certificate (for 127.0.0.1)."""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def slapd_or_skip() -> str:
    """The path of slapd (and ldapadd beside it); skip without them, or fail in a full run."""
    slapd = shutil.which("slapd") or ("/usr/sbin/slapd" if Path("/usr/sbin/slapd").exists() else None)
    missing = [
        what for what, path in (("slapd", slapd), ("ldapadd", shutil.which("ldapadd"))) if path is None
    ]
    if missing or not (MODULES / "back_mdb.so").exists():
        why = (
            f"OpenLDAP is not installed ({', '.join(missing) or 'back_mdb'} missing): "
            "apt-get install slapd ldap-utils (scripts/system-deps.sh does it)"
        )
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(why)
        pytest.skip(why)
    assert slapd is not None
    return slapd


def start_slapd(directory: Path, *, tls: bool = False) -> Slapd:
    """A slapd of our own on a free loopback port, loaded with ``PEOPLE``, answering binds; with
    ``tls``, also on ldaps:// (and StartTLS on ldap://) with a certificate of a CA of its own."""
    binary = slapd_or_skip()
    (directory / "db").mkdir(parents=True)
    certificates = _certificates(directory) if tls else None
    (directory / "slapd.conf").write_text(_config(directory, certificates))
    url = f"ldap://127.0.0.1:{_free_port()}/"
    ldaps = f"ldaps://127.0.0.1:{_free_port()}/" if tls else None
    log = directory / "slapd.log"
    with log.open("wb") as out:
        # -d 0: stays in the foreground (ours to stop), logging nothing but errors
        listen = f"{url} {ldaps}" if ldaps else url
        process = subprocess.Popen(
            [binary, "-f", str(directory / "slapd.conf"), "-h", listen, "-d", "0"], stdout=out, stderr=out
        )
    server = Slapd(url, process, log, ldaps, certificates[0] if certificates else None)
    (directory / "people.ldif").write_text(_ldif())
    deadline = time.monotonic() + 20
    while True:  # until it answers: ldapadd fails with "can't contact" while it starts
        added = subprocess.run(
            [
                "ldapadd",
                "-x",
                "-H",
                url,
                "-D",
                ROOT_DN,
                "-w",
                ROOT_PASSWORD,
                "-f",
                str(directory / "people.ldif"),
            ],
            capture_output=True,
            text=True,
        )
        if added.returncode == 0:
            return server
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"slapd did not start: {added.stderr}\n{log.read_text()}")
        time.sleep(0.05)
