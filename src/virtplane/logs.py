"""Logging set-up: plain text for people, JSON lines (with each record's extra fields) for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else was passed as ``extra=`` and is structured data.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class CurrentStream(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler on ``sys.stdout`` or ``sys.stderr`` as they are when a record is written,
    not when the handler was made: whatever swaps them later (a test runner's capture, a
    daemon's redirect) would otherwise leave the handler writing to a closed file."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    @property
    def stream(self) -> Any:
        return getattr(sys, self._name)

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # StreamHandler sets it in __init__ and setStream: the current one is always used


AUDIT_LOGGER = "virtplane.audit"
"""The audit log's export: one JSON document a line, on stdout (``configure``)."""


def configure(level: str = "info", fmt: str = "text") -> None:
    handler = CurrentStream("stderr")
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The audit records go to stdout, one JSON document a line, whatever the level and format of
    # the rest (which is on stderr): a log shipper reads them from the journal or a pipe.
    audit = logging.getLogger(AUDIT_LOGGER)
    audit_handler = CurrentStream("stdout")
    audit_handler.setFormatter(logging.Formatter("%(message)s"))
    audit.handlers[:] = [audit_handler]
    audit.setLevel(logging.INFO)
    audit.propagate = False
