"""Names the control plane makes up (``<base>-<word>-<5 random [a-z0-9]>``, a DNS-1123 label), and
the label it puts on what it made together."""

from __future__ import annotations

import random
import string

__all__ = ["BATCH_LABEL", "generated_name", "random_suffix"]

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
