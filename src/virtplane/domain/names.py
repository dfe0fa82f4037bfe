"""Every pattern a name, key, label, token, disk or file name must match, in one place, and the
names the control plane makes up (``<base>-<word>-<5 random [a-z0-9]>``, a DNS-1123 label).

A pattern is matched whole: ``NamePattern.matches`` uses ``fullmatch``, never ``match`` with
``$`` (Python's ``$`` also matches before a final newline, so ``"x\n"`` passed as a name).
For pydantic's ``pattern=`` and the OpenAPI document, ``NamePattern.anchored`` wraps it in
``^...$``: pydantic's regex engine (Rust's) and the ECMAScript of OpenAPI clients read ``$`` as
the end of the text. ``tests/domain/test_names.py`` tries every pattern with a newline.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field

__all__ = [
    "ALL_PATTERNS",
    "BATCH_LABEL",
    "BMC_SYSTEM_ID",
    "BMC_URL",
    "BRIDGE",
    "DNS_LABEL",
    "DRIVER_POOL",
    "HOST_PATH",
    "IMAGE_FILE",
    "IMPORT_URL",
    "LABEL_KEY",
    "LIBVIRT_DOMAIN_NAME",
    "LIBVIRT_VOLUME_NAME",
    "MAC",
    "MIGRATION_ADDRESS",
    "RELATIVE_SINCE",
    "SETTING_KEY",
    "SHA256",
    "UNICAST_MAC",
    "WEB_ASSET",
    "NamePattern",
    "generated_name",
    "random_suffix",
]


@dataclass(frozen=True)
class NamePattern:
    what: str
    body: str
    """The regular expression, without anchors; a top-level alternation in a group of its own.
    (``anchored`` keeps the pattern strings the models had, so that the stored bodies' schema
    fingerprints, and with them the bodies, stay as they are: ``store/bodies.py``.)"""
    example: str
    """A value it accepts (the tests add a newline to it)."""
    newlines: bool = False
    """A newline is part of what it accepts (a path, as the model always took it; not a name)."""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.body))

    def matches(self, value: str) -> bool:
        return self.regex.fullmatch(value) is not None

    @property
    def anchored(self) -> str:
        """For pydantic's ``pattern=`` and OpenAPI, whose ``$`` is the end of the text."""
        return f"^{self.body}$"


DNS_LABEL = NamePattern("a DNS-1123 label", r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "web-1")
LABEL_KEY = NamePattern(
    "a label key",
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
    "virtplane.io/batch",
)
SETTING_KEY = NamePattern("a setting key", r"[a-z0-9]([-a-z0-9_.]{0,126}[a-z0-9])?", "vm.default_cpu")
IMAGE_FILE = NamePattern("an image file name", r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}", "debian-12.qcow2")
MAC = NamePattern("a MAC address", r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", "52:54:00:12:34:56")
UNICAST_MAC = NamePattern(
    "a unicast MAC address", r"[0-9a-f][02468ace](:[0-9a-f]{2}){5}", "52:54:00:12:34:56"
)
BRIDGE = NamePattern("a Linux bridge name", r"[A-Za-z0-9_.-]{1,15}", "br0")
BMC_URL = NamePattern("a BMC base URL", r"https?://[^\s/?#@]+(:\d{1,5})?/?", "https://10.0.0.9:443")
BMC_SYSTEM_ID = NamePattern("a Redfish system id", r"[A-Za-z0-9._~-]+", "System.Embedded.1")
MIGRATION_ADDRESS = NamePattern(
    "an address or host name",
    r"(\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)",
    "host-1.example",
)
DRIVER_POOL = NamePattern("a libvirt pool name", r"[A-Za-z0-9_.-]*", "default")
HOST_PATH = NamePattern("an absolute path", r"/[^\x00]*", "/var/lib/virtplane/images", newlines=True)
LIBVIRT_VOLUME_NAME = NamePattern("a volume file name", r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}", "vp-1234.qcow2")
LIBVIRT_DOMAIN_NAME = NamePattern("a libvirt domain name", r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", "vp-web-1")
WEB_ASSET = NamePattern("a dashboard file name", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", "app.js")
KIND = NamePattern("a kind", r"[A-Za-z][A-Za-z0-9]{0,63}", "VirtualMachine")
RELATIVE_SINCE = NamePattern("a duration back (15m, 1h, 24h)", r"(\d{1,6})(s|m|h|d)", "15m")
SHA256 = NamePattern("a SHA-256 in lowercase hex", r"[0-9a-f]{64}", "0" * 64)
IMPORT_URL = NamePattern("an http(s) URL", r"https?://[^\s]+", "https://mirror.example/debian-12.qcow2")

ALL_PATTERNS = (
    DNS_LABEL,
    LABEL_KEY,
    SETTING_KEY,
    IMAGE_FILE,
    MAC,
    UNICAST_MAC,
    BRIDGE,
    BMC_URL,
    BMC_SYSTEM_ID,
    MIGRATION_ADDRESS,
    DRIVER_POOL,
    HOST_PATH,
    LIBVIRT_VOLUME_NAME,
    LIBVIRT_DOMAIN_NAME,
    WEB_ASSET,
    KIND,
    SHA256,
    IMPORT_URL,
    RELATIVE_SINCE,
)

BATCH_LABEL = "virtplane.io/batch"
"""Label of the operations one request made for many VMs (``POST /v1/vms/actions/...``)."""

_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits
_MAX_NAME = 63


def random_suffix() -> str:
    return "".join(random.choices(_SUFFIX_ALPHABET, k=5))


def generated_name(base: str, word: str, suffix: str) -> str:
    """``<base>-<word>-<suffix>``, ``base`` shortened so that the whole stays a DNS-1123 label."""
    tail = f"-{word}-{suffix}"
    return base[: _MAX_NAME - len(tail)].rstrip("-") + tail
