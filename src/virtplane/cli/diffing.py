"""``diff -f``: what ``apply -f`` would change, as a unified diff of YAML, asked of the server.

Exit codes as kubectl's: 0 no difference, 1 differences; an error has its own code from the
table (``exit_codes``), so a document the server refuses (1 there too) is also named on stderr.
"""

from __future__ import annotations

import sys

import typer

from virtplane.cli.context import state_of
from virtplane.cli.errors import CliError, ServerUnreachable
from virtplane.cli.exit_codes import ExitCode, common_exit_code
from virtplane.cli.manifests import plan, what_apply_writes
from virtplane.cli.output import print_error
from virtplane.cli.resources import FilenamesOption, read_manifests

__all__ = ["DIFF_EPILOG", "diff"]

DIFF_EPILOG = (
    "Examples:\n"
    "  virtplane diff -f fleet.yaml\n"
    "  virtplane diff -f vm.yaml && echo 'nothing to apply'\n\n"
    "Compares the server's object with what apply would write (as the server would store it: "
    "defaults and the fields it fills included; nothing is written), showing kind, name, labels, "
    "annotations and spec. Exit 0: no differences; 1: differences (or a document refused, named "
    "on stderr)."
)


def diff(ctx: typer.Context, filenames: FilenamesOption) -> None:
    """Show what `apply -f` would change: a unified diff of each object, server's against applied."""
    import difflib  # only here: the other commands need none of it

    import yaml

    state = state_of(ctx)
    failures: list[CliError] = []
    differs = False
    for manifest in read_manifests(filenames):
        try:
            current, desired = plan(state.client, manifest)
        except ServerUnreachable:
            raise
        except CliError as error:
            failures.append(error)
            print_error(state.err_console, error.reason, f"{manifest.located(error)}: {error.message}")
            continue
        before, after = (
            yaml.safe_dump(what_apply_writes(obj), sort_keys=False).splitlines(keepends=True) if obj else []
            for obj in (current, desired)
        )
        lines = list(
            difflib.unified_diff(
                before,
                after,
                fromfile=f"{manifest.reference} (server)" if current else "/dev/null",
                tofile=f"{manifest.reference} ({manifest.source})",
            )
        )
        if lines:
            differs = True
            sys.stdout.writelines(line if line.endswith("\n") else line + "\n" for line in lines)
    if failures:
        raise typer.Exit(common_exit_code(failures))
    if differs:
        raise typer.Exit(ExitCode.FAILED)
