"""Verification of a backup's files with ``qemu-img`` (issue 36), run on the control plane's
machine against the target's directory: the target is shared storage the hosts mount, and on
this rig (and wherever the server mounts it too) the server reads it at the same path. A
target the server does not see is a clear refusal, not a guess.

Each disk's chain (the backup's own file first, then the bases it reads through):
``qemu-img check`` of every file (an image with corrupt clusters or metadata fails), ``qemu-img
info --backing-chain`` of the top (a link to a missing or other file fails), then the chain is
flattened (``qemu-img convert``) to a temporary file and ``qemu-img compare`` reads the disk
through its top against that copy, cluster by cluster (a cluster unreadable through the chain
fails).

Blocking: call from a thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from virtplane.drivers.backups import BackupCheck
from virtplane.drivers.errors import PermanentError

QEMU_IMG = "qemu-img"
CHECK_CORRUPT = 2  # qemu-img check: 0 clean, 1 check not completed, 2 corruptions, 3 leaked clusters only


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QEMU_IMG, *args], capture_output=True, text=True, check=False)


def _said(result: subprocess.CompletedProcess[str]) -> str:
    """The last line qemu-img wrote: its reason."""
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {result.returncode}"


def verify_chains(directory: str, chains: tuple[tuple[str, ...], ...]) -> BackupCheck:
    if not os.path.isdir(directory):
        raise PermanentError(
            f"the target's directory {directory} is not reachable from the control plane's machine "
            "(verify runs qemu-img here: mount the target here at the same path)"
        )
    files = 0
    for chain in chains:
        paths = [os.path.join(directory, volume) for volume in chain]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            return BackupCheck(
                False, f"{os.path.basename(missing[0])}: missing from the target (a broken chain)"
            )
        failed = _chain_links(paths)  # first: a check opens each file's backing file too
        for path in paths:
            checked = _run("check", "-U", "-f", "qcow2", path)
            if not failed and checked.returncode not in (0, 3):
                failed = f"{os.path.basename(path)}: qemu-img check: {_said(checked)}"
            files += 1
        failed = failed or _read_whole(directory, paths[0])
        if failed:
            return BackupCheck(False, failed)
    return BackupCheck(True, f"{files} file(s) of {len(chains)} disk(s) checked, each disk read whole")


def _chain_links(paths: list[str]) -> str:
    """Why the top's backing chain is not ``paths`` (in order), or ''."""
    info = _run("info", "-U", "--backing-chain", "--output=json", paths[0])
    if info.returncode != 0:
        return f"{os.path.basename(paths[0])}: its backing chain does not open: {_said(info)}"
    found = [os.path.realpath(image["filename"]) for image in json.loads(info.stdout)]
    wanted = [os.path.realpath(path) for path in paths]
    if found != wanted:
        names = " <- ".join(os.path.basename(f) for f in found)
        return f"{os.path.basename(paths[0])}: its chain is {names}, not the backups it builds on"
    return ""


def _read_whole(directory: str, top: str) -> str:
    """Flatten the chain and compare it with the disk read through its top: '' when equal."""
    with tempfile.TemporaryDirectory(prefix=".verify-", dir=directory) as scratch:
        flat = os.path.join(scratch, "flat.qcow2")
        converted = _run("convert", "-U", "-O", "qcow2", top, flat)
        if converted.returncode != 0:
            return f"{os.path.basename(top)}: the chain does not read whole: {_said(converted)}"
        compared = _run("compare", "-U", "-f", "qcow2", "-F", "qcow2", top, flat)
        if compared.returncode != 0:
            return f"{os.path.basename(top)}: the chain differs from its flattened copy: {_said(compared)}"
    return ""
