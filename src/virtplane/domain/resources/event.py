"""An event: one line of the append-only audit trail."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Event(BaseModel):
    """One line of the append-only audit trail; never updated."""

    id: int = 0
    time: datetime | None = None
    kind: str
    name: str
    type: EventType = EventType.NORMAL
    reason: str
    message: str = ""
