"""Host liveness (issue 15): Up, Disconnected, Down, as one table with hysteresis.

The host controller probes each host (its libvirt connection and a call that answers
only when the hypervisor does: the heartbeat). What a probe found, together with how
long the current unbroken streak of answers or silence has lasted, is one
``Observation``; ``TRANSITIONS`` says where it leads. Nothing else decides liveness.

Hysteresis, so that a flapping host causes no recovery:

- Up becomes Disconnected only after ``disconnected_after_s`` of unbroken silence;
  shorter drops leave it Up.
- Disconnected becomes Up again only after ``reconnected_after_s`` of unbroken
  answers; an answer in between restarts the silence clock, so fencing (which needs
  ``fence_after_s`` of unbroken silence) never fires on a host that keeps answering
  now and then.
- Down is reached only when the host is known to be powered off: fenced through its
  BMC (confirmed Off) or confirmed by an admin (``spec.fenced``). Nothing else leads
  there, and only clearing the fence leads out (to Disconnected, so the host must
  answer for ``reconnected_after_s`` before it takes VMs again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from virtplane.domain.resources import HostConnection

__all__ = [
    "TRANSITIONS",
    "LivenessThresholds",
    "Observation",
    "fence_due",
    "fence_due_in",
    "next_liveness",
    "observe",
]


class Observation(StrEnum):
    """What the latest probe says, with the length of its streak."""

    FENCED = "Fenced"
    """The host is known to be off: the BMC confirmed Off, or an admin set ``spec.fenced``."""
    ANSWERS = "Answers"
    """It answers, and has for at least ``reconnected_after_s``."""
    ANSWERS_BRIEFLY = "AnswersBriefly"
    """It answers, for less than ``reconnected_after_s`` so far."""
    SILENT_BRIEFLY = "SilentBriefly"
    """It does not answer, for less than ``disconnected_after_s`` so far."""
    SILENT = "Silent"
    """It has not answered for at least ``disconnected_after_s``."""


@dataclass(frozen=True)
class LivenessThresholds:
    """The settings ``host.liveness.*`` and ``host.fencing.after_s``, in seconds."""

    disconnected_after_s: float = 10.0
    reconnected_after_s: float = 60.0
    fence_after_s: float = 15.0


_C = HostConnection
_O = Observation

TRANSITIONS: Mapping[tuple[HostConnection, Observation], HostConnection] = MappingProxyType(
    {
        # Never reached yet (a new host, or a status from before liveness existed).
        (_C.UNKNOWN, _O.ANSWERS): _C.UP,
        (_C.UNKNOWN, _O.ANSWERS_BRIEFLY): _C.UP,
        (_C.UNKNOWN, _O.SILENT_BRIEFLY): _C.UNKNOWN,
        (_C.UNKNOWN, _O.SILENT): _C.DISCONNECTED,
        (_C.UNKNOWN, _O.FENCED): _C.DOWN,
        # Up: short drops are tolerated.
        (_C.UP, _O.ANSWERS): _C.UP,
        (_C.UP, _O.ANSWERS_BRIEFLY): _C.UP,
        (_C.UP, _O.SILENT_BRIEFLY): _C.UP,
        (_C.UP, _O.SILENT): _C.DISCONNECTED,
        (_C.UP, _O.FENCED): _C.DOWN,
        # Disconnected: back to Up only after answering steadily.
        (_C.DISCONNECTED, _O.ANSWERS): _C.UP,
        (_C.DISCONNECTED, _O.ANSWERS_BRIEFLY): _C.DISCONNECTED,
        (_C.DISCONNECTED, _O.SILENT_BRIEFLY): _C.DISCONNECTED,
        (_C.DISCONNECTED, _O.SILENT): _C.DISCONNECTED,
        (_C.DISCONNECTED, _O.FENCED): _C.DOWN,
        # Down: the fence holds whatever the host does; clearing it means Disconnected.
        (_C.DOWN, _O.FENCED): _C.DOWN,
        (_C.DOWN, _O.ANSWERS): _C.DISCONNECTED,
        (_C.DOWN, _O.ANSWERS_BRIEFLY): _C.DISCONNECTED,
        (_C.DOWN, _O.SILENT_BRIEFLY): _C.DISCONNECTED,
        (_C.DOWN, _O.SILENT): _C.DISCONNECTED,
    }
)


def observe(
    *,
    fenced: bool,
    answers: bool,
    answering_for_s: float,
    silent_for_s: float,
    thresholds: LivenessThresholds,
) -> Observation:
    """Classify one probe: ``answering_for_s`` / ``silent_for_s`` are the current streak's age."""
    if fenced:
        return Observation.FENCED
    if answers:
        steady = answering_for_s >= thresholds.reconnected_after_s
        return Observation.ANSWERS if steady else Observation.ANSWERS_BRIEFLY
    long = silent_for_s >= thresholds.disconnected_after_s
    return Observation.SILENT if long else Observation.SILENT_BRIEFLY


def next_liveness(current: HostConnection, observation: Observation) -> HostConnection:
    return TRANSITIONS[(current, observation)]


def fence_due(liveness: HostConnection, silent_for_s: float, thresholds: LivenessThresholds) -> bool:
    """Whether a host with fencing configured should be powered off now: Disconnected, and
    silent without a break for ``fence_after_s`` (an answer restarts the clock)."""
    return liveness is HostConnection.DISCONNECTED and silent_for_s >= thresholds.fence_after_s


def fence_due_in(silent_for_s: float, thresholds: LivenessThresholds) -> float:
    """Seconds until a host silent for ``silent_for_s`` is due for its fence (``fence_due``: it must
    be Disconnected too, so the later of the two thresholds); negative once overdue."""
    return max(thresholds.fence_after_s, thresholds.disconnected_after_s) - silent_for_s
