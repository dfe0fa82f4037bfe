"""virtplane: a virtualization control plane that keeps every VM in the power state its owner asked for."""

from importlib.metadata import PackageNotFoundError, version

UNKNOWN_VERSION = "0+unknown"
"""The version of a source tree that was never installed (no package metadata to read)."""

try:
    __version__ = version("virtplane")  # one place: pyproject.toml's [project] version
except PackageNotFoundError:
    __version__ = UNKNOWN_VERSION
