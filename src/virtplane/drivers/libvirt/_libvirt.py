"""Lazy access to libvirt-python, and translation of its errors into driver errors.

The rest of the project imports ``virtplane.drivers.libvirt`` without libvirt
installed; only opening a connection needs the module.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from virtplane.drivers.errors import (
    DriverError,
    DriverUnavailable,
    HostUnreachable,
    NotFound,
    PermanentError,
    TransientError,
    Unsupported,
)

INSTALL_HINT = (
    "the libvirt driver cannot load: libvirt-python is not installed on the control plane. "
    "Install it in virtplane's environment, built for the system libvirt: "
    "apt-get install libvirt-dev pkg-config gcc python3-dev, then "
    'pip install "libvirt-python==$(pkg-config --modversion libvirt)"'
)

_quiet_lock = threading.Lock()
_quiet = False


def load() -> Any:
    """The ``libvirt`` module; raises DriverUnavailable when libvirt-python is missing."""
    global _quiet
    try:
        import libvirt
    except ImportError as exc:
        raise DriverUnavailable(INSTALL_HINT) from exc
    with _quiet_lock:
        if not _quiet:
            # libvirt prints every error to stderr by default; ours become exceptions instead.
            libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
            _quiet = True
    return libvirt


def available() -> bool:
    try:
        load()
    except PermanentError:
        return False
    return True


@functools.cache
def _code_classes() -> dict[int, type[DriverError]]:
    lv = load()
    classes: dict[int, type[DriverError]] = {}

    def put(cls: type[DriverError], *names: str) -> None:
        for name in names:
            code = getattr(lv, name, None)  # older libvirt may lack newer codes
            if code is not None:
                classes[code] = cls

    put(
        NotFound,
        "VIR_ERR_NO_DOMAIN",
        "VIR_ERR_NO_STORAGE_POOL",
        "VIR_ERR_NO_STORAGE_VOL",
        "VIR_ERR_NO_DOMAIN_SNAPSHOT",
        "VIR_ERR_NO_DOMAIN_METADATA",
        "VIR_ERR_NO_DOMAIN_BACKUP",
    )
    put(Unsupported, "VIR_ERR_NO_SUPPORT", "VIR_ERR_ARGUMENT_UNSUPPORTED", "VIR_ERR_CONFIG_UNSUPPORTED")
    put(
        PermanentError,
        "VIR_ERR_XML_ERROR",
        "VIR_ERR_XML_DETAIL",
        "VIR_ERR_INVALID_ARG",
        "VIR_ERR_INVALID_DOMAIN",
        "VIR_ERR_DOM_EXIST",
        "VIR_ERR_STORAGE_VOL_EXIST",
        "VIR_ERR_OPERATION_UNSUPPORTED",
        "VIR_ERR_MIGRATE_UNSAFE",
        "VIR_ERR_AUTH_FAILED",
        "VIR_ERR_AUTH_CANCELLED",
    )
    put(
        HostUnreachable,
        "VIR_ERR_NO_CONNECT",
        "VIR_ERR_RPC",
        "VIR_ERR_INVALID_CONN",
    )
    return classes


def error_code(exc: BaseException) -> int | None:
    get = getattr(exc, "get_error_code", None)
    code = get() if callable(get) else None
    return code if isinstance(code, int) else None


def translate(exc: BaseException, *, connection_alive: bool = True) -> DriverError:
    """The driver error for a libvirt error; a dead connection always means HostUnreachable."""
    message = str(exc) or type(exc).__name__
    if not connection_alive:
        return HostUnreachable(message)
    cls = _code_classes().get(error_code(exc) or -1, TransientError)
    return cls(message)


def is_libvirt_error(exc: BaseException) -> bool:
    lv: Any = load()
    return isinstance(exc, lv.libvirtError)


__all__ = ["available", "error_code", "is_libvirt_error", "load", "translate"]
