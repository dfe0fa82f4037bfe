"""What one row of the table holds, and the small statistics the rows share."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    number: int
    title: str
    figure: float | None
    """The measured figure (None: not measured in this run; ``note`` says why)."""
    unit: str
    target: str
    met: bool | None
    ratio: float | None = None
    """For rates: the figure divided by the raw-SQLite ceiling of the same run."""
    details: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    """Median, 90th percentile and extremes of latencies given in seconds, in milliseconds."""
    ms = sorted(s * 1000 for s in samples_s)
    if not ms:
        return {}
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(p90, 2),
        "min_ms": round(ms[0], 2),
        "max_ms": round(ms[-1], 2),
    }


def at_least(figure: float | None, target: float) -> bool | None:
    return None if figure is None else figure >= target


def at_most(figure: float | None, target: float) -> bool | None:
    return None if figure is None else figure <= target
