"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

from .plan import (
    FAULT_KINDS,
    Fault,
    FaultKind,
    FaultSchedule,
    Match,
    ProxyConnection,
    ScheduledFault,
    issued,
    named,
)
from .proxy import FaultEvent, FaultProxy, ProxyError

__all__: list[str] = [
    "FAULT_KINDS",
    "Fault",
    "FaultEvent",
    "FaultKind",
    "FaultProxy",
    "FaultSchedule",
    "Match",
    "ProxyConnection",
    "ProxyError",
    "ScheduledFault",
    "issued",
    "named",
]
