"""What ``virtplane`` exits with, for scripts: the one table of exit codes.

Every command ends through the root group (``main.VirtplaneGroup``), which turns an error
into its code with ``exit_code_for``; usage errors are click's own (2). The CLI reference
(``docs/cli.md``) and ``virtplane --help`` print this table.
"""

from __future__ import annotations

from enum import IntEnum

from virtplane.cli.client import ApiError, CliError, ServerUnreachable, WaitTimedOut
from virtplane.cli.tls import CertificateNotTrusted

__all__ = ["ExitCode", "exit_code_for", "exit_code_table"]


class ExitCode(IntEnum):
    """The codes; what each means is ``MEANINGS``."""

    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    TIMEOUT = 4
    DENIED = 5
    NOT_FOUND = 6
    UNTRUSTED = 7


MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done; with --wait, what was waited for succeeded",
    ExitCode.FAILED: "refused by the server (invalid, conflict, not applicable), or what --wait "
    "followed failed (an operation Failed or was Superseded, ErrorInMaintenance, a VM refused)",
    ExitCode.USAGE: "the command line is wrong (unknown option, missing argument, bad value)",
    ExitCode.UNREACHABLE: "no server answered at --url / VIRTPLANE_URL",
    ExitCode.TIMEOUT: "--wait gave up after --timeout seconds; the work goes on in the server",
    ExitCode.DENIED: "no token, an unknown token, or a role that may not do this (HTTP 401, 403)",
    ExitCode.NOT_FOUND: "the named resource does not exist (HTTP 404)",
    ExitCode.UNTRUSTED: "the server's TLS certificate is not trusted: no --ca-file / system CA signed "
    "it, or it is not the one --tls-fingerprint pins",
}

_BY_STATUS = {401: ExitCode.DENIED, 403: ExitCode.DENIED, 404: ExitCode.NOT_FOUND}


def exit_code_for(error: CliError) -> ExitCode:
    if isinstance(error, ServerUnreachable):
        return ExitCode.UNREACHABLE
    if isinstance(error, CertificateNotTrusted):
        return ExitCode.UNTRUSTED
    if isinstance(error, WaitTimedOut):
        return ExitCode.TIMEOUT
    if isinstance(error, ApiError):
        return _BY_STATUS.get(error.status_code, ExitCode.FAILED)
    return ExitCode.FAILED


def exit_code_table() -> str:
    """``  0  done; ...`` one line per code, for help texts and the docs."""
    return "\n".join(f"  {code.value}  {MEANINGS[code]}" for code in ExitCode)
