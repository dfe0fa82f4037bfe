"""What ``virtplane`` exits with, for scripts: the one table of exit codes.

Every command ends through the root group (``main.VirtplaneGroup``), which turns an error
into its code with ``exit_code_for``: by the error's type, then by the API's reason (the same
missing VM is 404 NotFound to ``get`` and 422 VMNotFound to an action), then by the HTTP
status. Usage errors are click's own (2). The CLI reference (``docs/cli.md``) and
``virtplane --help`` print this table.
"""

from __future__ import annotations

from enum import IntEnum

from virtplane.cli.errors import ApiError, CliError, ServerUnreachable, WaitTimedOut
from virtplane.cli.tls import CertificateNotTrusted

__all__ = ["ExitCode", "common_exit_code", "exit_code_for", "exit_code_table"]


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
    ExitCode.USAGE: "the command line is wrong (unknown option, missing argument, bad value, "
    "a --url that is not http:// or https://)",
    ExitCode.UNREACHABLE: "no server answered at --url / VIRTPLANE_URL",
    ExitCode.TIMEOUT: "--wait gave up after --timeout seconds; the work goes on in the server",
    ExitCode.DENIED: "no token, an unknown, revoked or expired token, or a role that may not do this (HTTP 401, 403)",
    ExitCode.NOT_FOUND: "the named resource does not exist (HTTP 404, or VMNotFound for a VM action)",
    ExitCode.UNTRUSTED: "the server's TLS certificate is not trusted: no --ca-file / system CA signed "
    "it, or it is not the one --tls-fingerprint pins",
}

_BY_REASON = {"VMNotFound": ExitCode.NOT_FOUND}
"""API reasons whose code is not their HTTP status's: an action on a missing VM is a 422
(the operation it would create names no VM) but, to a script, the VM it named does not exist."""
_BY_STATUS = {401: ExitCode.DENIED, 403: ExitCode.DENIED, 404: ExitCode.NOT_FOUND}


def exit_code_for(error: CliError) -> ExitCode:
    if isinstance(error, ServerUnreachable):
        return ExitCode.UNREACHABLE
    if isinstance(error, CertificateNotTrusted):
        return ExitCode.UNTRUSTED
    if isinstance(error, WaitTimedOut):
        return ExitCode.TIMEOUT
    if isinstance(error, ApiError):
        return _BY_REASON.get(error.reason) or _BY_STATUS.get(error.status_code, ExitCode.FAILED)
    return ExitCode.FAILED


def common_exit_code(errors: list[CliError]) -> ExitCode:
    """One code for several errors (``apply`` of many documents): theirs if they agree, else 1."""
    codes = {exit_code_for(error) for error in errors}
    return codes.pop() if len(codes) == 1 else ExitCode.FAILED


def exit_code_table() -> str:
    """``  0  done; ...`` one line per code, for help texts and the docs."""
    return "\n".join(f"  {code.value}  {MEANINGS[code]}" for code in ExitCode)
