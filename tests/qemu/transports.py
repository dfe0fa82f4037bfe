"""What the qemu+tls and qemu+ssh tests need besides the rig: a throwaway PKI (openssl) and an sshd.

Everything lives in the test's own directory: no system certificate, SSH key, known_hosts or
service is touched (sshd needs its privilege-separation directory, /run/sshd, to exist: it is
made if missing, as the openssh-server package's unit does). All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.crash.server import free_port

SSHD = Path("/usr/sbin/sshd")


def require_tool(path: str | Path) -> None:
    """Skip without a tool, or fail with VIRTPLANE_QEMU_REQUIRED=1 (scripts/system-deps.sh installs it)."""
    if shutil.which(str(path)) is None:
        problem = f"{path} is not installed (run scripts/system-deps.sh)"
        if os.environ.get("VIRTPLANE_QEMU_REQUIRED") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True)


def _key(path: Path) -> None:
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        str(path),
        cwd=path.parent,
    )


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / f"{name}-key.pem", directory / f"{name}-cert.pem"
    _key(key)
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    return cert, key


def issue(ca: tuple[Path, Path], cert: Path, key: Path, *, common_name: str, server: bool) -> None:
    """A certificate for ``common_name`` signed by ``ca``: a server's names 127.0.0.1 (as the URI does)."""
    _key(key)
    extensions = cert.with_suffix(".ext")
    usage = "serverAuth" if server else "clientAuth"
    lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    lines.append(f"extendedKeyUsage={usage}")
    if server:
        lines.append("subjectAltName=IP:127.0.0.1")
    extensions.write_text("\n".join(lines) + "\n")
    request = cert.with_suffix(".csr")
    _openssl(
        "req", "-new", "-key", str(key), "-out", str(request), "-subj", f"/CN={common_name}", cwd=cert.parent
    )
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(extensions),
        cwd=cert.parent,
    )  # fmt: skip


@dataclass(frozen=True)
class Pki:
    server_dir: Path  # servercert.pem, serverkey.pem, cacert.pem: what the daemon's libvirtd.conf names
    client_dir: Path  # cacert.pem, clientcert.pem, clientkey.pem: libvirt's layout for ?pkipath=
    stranger_dir: Path  # the same layout, all of another CA: neither side trusts the other


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, in libvirt's file layout."""
    ca = make_ca(directory / "ca", "virtplane-test-ca")
    server, client, stranger = directory / "server", directory / "client", directory / "stranger"
    for side in (server, client):
        side.mkdir(parents=True)
        shutil.copyfile(ca[0], side / "cacert.pem")
    issue(ca, server / "servercert.pem", server / "serverkey.pem", common_name="127.0.0.1", server=True)
    issue(ca, client / "clientcert.pem", client / "clientkey.pem", common_name="virtplane", server=False)
    other_ca = make_ca(directory / "other-ca", "someone-else")
    stranger.mkdir(parents=True)
    shutil.copyfile(other_ca[0], stranger / "cacert.pem")
    issue(
        other_ca,
        stranger / "clientcert.pem",
        stranger / "clientkey.pem",
        common_name="stranger",
        server=False,
    )
    return Pki(server, client, stranger)


def tls_uri(port: int, pkipath: Path) -> str:
    return f"qemu+tls://127.0.0.1:{port}/system?pkipath={pkipath}"


@dataclass(frozen=True)
class Sshd:
    port: int
    client_key: Path  # authorized for root
    known_hosts: Path  # names 127.0.0.1:port with the server's host key
    ssh_command: Path  # ssh that trusts only known_hosts above (ssh_command())

    def uri(self, socket_path: str, *, keyfile: Path | None = None, command: Path | None = None) -> str:
        """qemu+ssh to the daemon whose unix socket is ``socket_path``, through this sshd; netcat
        (not virt-ssh-helper, which would open the default socket) carries it to that socket."""
        return (
            f"qemu+ssh://root@127.0.0.1:{self.port}/system?keyfile={keyfile or self.client_key}"
            f"&socket={socket_path}&command={command or self.ssh_command}&proxy=netcat"
        )


def ssh_command(directory: Path, known_hosts: Path) -> Path:
    """An ssh for libvirt's ``command=`` URI parameter that reads only a config in ``directory``:
    host keys from ``known_hosts`` alone, strictly checked, and never ~/.ssh (nothing written there)."""
    config = directory / "ssh_config"
    config.write_text(
        f"UserKnownHostsFile {known_hosts}\nGlobalKnownHostsFile /dev/null\nStrictHostKeyChecking yes\n"
        "UpdateHostKeys no\nIdentitiesOnly yes\n"
    )
    command = directory / "ssh"
    command.write_text(f'#!/bin/sh\nexec ssh -F {config} "$@"\n')
    command.chmod(0o755)
    return command


def keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


@contextmanager
def running_sshd(directory: Path, mounts_of: int | None = None) -> Iterator[Sshd]:
    """An sshd on a free loopback port, with its own host key and one authorized client key;
    ``mounts_of``: the pid of a rig daemon whose mount namespace it runs in, so that it sees the
    files that daemon sees (its domains' sockets), as a real host's sshd does."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    host_key, client_key = directory / "host_key", directory / "client_key"
    keygen(host_key, "virtplane-test-host")
    keygen(client_key, "virtplane-test-client")
    authorized = directory / "authorized_keys"
    shutil.copyfile(client_key.with_suffix(".pub"), authorized)
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {directory}/sshd.pid\n"
        f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = (directory / "sshd.log").open("w")
    inside = ["nsenter", f"--mount=/proc/{mounts_of}/ns/mnt", "--"] if mounts_of is not None else []
    process = subprocess.Popen(
        [*inside, str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_listening(port, process)
        yield Sshd(port, client_key, known_hosts, ssh_command(directory, known_hosts))
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"sshd exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"sshd is not listening on 127.0.0.1:{port}")
