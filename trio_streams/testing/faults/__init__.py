"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

from .files import (
    FRAME_FIELDS,
    FrameField,
    FrameLocation,
    cut_copies,
    damage_frame_header,
    flip_bit,
    frame_offsets,
    zero_range,
)
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
    "FRAME_FIELDS",
    "MAX_LINE",
    "AppProcess",
    "AppProcessError",
    "Fault",
    "FaultEvent",
    "FaultKind",
    "FaultProxy",
    "FaultSchedule",
    "FrameField",
    "FrameLocation",
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
    "cut_copies",
    "damage_frame_header",
    "flip_bit",
    "frame_offsets",
    "issued",
    "ledger_middleware",
    "named",
    "zero_range",
]
