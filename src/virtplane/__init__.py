"""virtplane: a virtualization control plane that keeps every VM in the power state its owner asked for."""

from __future__ import annotations

UNKNOWN_VERSION = "0+unknown"
"""The version of a source tree that was never installed (no package metadata to read)."""


def __getattr__(name: str) -> str:
    # read on first use: importlib.metadata costs the CLI's every start-up tens of milliseconds
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("virtplane")  # one place: pyproject.toml's [project] version
    except PackageNotFoundError:
        found = UNKNOWN_VERSION
    globals()["__version__"] = found
    return found
