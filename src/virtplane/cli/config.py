"""``serve --config FILE``: a TOML file whose keys are serve's flags without the ``--``.

::

    data-dir = "/var/lib/virtplane"
    host = "0.0.0.0"
    log-format = "json"

The file's values become the flags' defaults (click's ``default_map``), so a flag given on
the command line wins over the file, and each value is checked as the flag's own would be;
it means what the flag's would (a relative ``data-dir`` is relative to the working
directory). A key that is not a flag is an error naming the key and the file.

A table is a section of settings that are not flags (``[identity]``: who may log in, in the
operator's guide); ``config_section`` reads it for ``serve``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

__all__ = ["config_section", "load_config"]

SECTIONS = frozenset({"identity"})
"""The tables a config file may hold beside the flags."""


def load_config(ctx: typer.Context, param: typer.CallbackParam, path: Path | None) -> Path | None:
    """The eager callback of ``--config``: the file's values become the other flags' defaults."""
    if path is not None:
        ctx.default_map = {**(ctx.default_map or {}), **flag_defaults(ctx, path, own=param.name)}
    return path


def flag_defaults(ctx: typer.Context, path: Path, *, own: str | None) -> dict[str, Any]:
    """{parameter name: value} from the TOML file ``path``, for the command of ``ctx``."""
    import tomllib  # here: most commands read no file (issue 39)

    try:
        document = tomllib.loads(path.read_text())
    except OSError as error:
        raise typer.BadParameter(f"cannot read {path}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise typer.BadParameter(f"{path} is not TOML: {error}") from None
    flags = {
        flag.removeprefix("--"): option
        for option in ctx.command.params
        if option.name != own
        for flag in option.opts
        if flag.startswith("--")
    }
    defaults: dict[str, Any] = {}
    for key, value in document.items():
        if key in SECTIONS:
            continue
        option = flags.get(key)
        if option is None or option.name is None:
            raise typer.BadParameter(
                f"unknown key {key!r} in {path}; the keys are the flags of "
                f"`{ctx.command_path}` without '--': {', '.join(sorted(flags))}; "
                f"and the tables {', '.join(f'[{s}]' for s in sorted(SECTIONS))}"
            )
        if not isinstance(value, str | int | float | bool):  # a table, an array or a date
            raise typer.BadParameter(f"{key} in {path} must be a string, a number or true/false")
        try:
            option.process_value(ctx, value)  # converts and checks, as for the flag itself
        except typer.BadParameter as error:
            raise typer.BadParameter(f"{key} = {value!r} in {path}: {error.message}") from None
        defaults[option.name] = value
    return defaults


def config_section(path: Path, name: str) -> Any:
    """The table ``[name]`` of the TOML file ``path`` (already read once by ``--config``), or None."""
    import tomllib

    try:
        return tomllib.loads(path.read_text()).get(name)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise typer.BadParameter(f"cannot read {path}: {error}") from None
