"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

from .ledger import (
    MAX_LINE,
    Ledger,
    LedgerError,
    LedgerReport,
    OrderBreak,
    RunOutcome,
    SettleHow,
)
from .ledger_middleware import LedgerMiddleware, ledger_middleware
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
from .processes import (
    AppProcess,
    AppProcessError,
    KillPoint,
    KillPointMissed,
    KillPointNotReached,
    UnexpectedExit,
)
from .proxy import FaultEvent, FaultProxy, ProxyError

__all__: list[str] = [
    "FAULT_KINDS",
    "MAX_LINE",
    "AppProcess",
    "AppProcessError",
    "Fault",
    "FaultEvent",
    "FaultKind",
    "FaultProxy",
    "FaultSchedule",
    "KillPoint",
    "KillPointMissed",
    "KillPointNotReached",
    "Ledger",
    "LedgerError",
    "LedgerMiddleware",
    "LedgerReport",
    "Match",
    "OrderBreak",
    "ProxyConnection",
    "ProxyError",
    "RunOutcome",
    "ScheduledFault",
    "SettleHow",
    "UnexpectedExit",
    "issued",
    "ledger_middleware",
    "named",
]
