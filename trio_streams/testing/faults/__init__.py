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

__all__: list[str] = [
    "MAX_LINE",
    "Ledger",
    "LedgerError",
    "LedgerMiddleware",
    "LedgerReport",
    "OrderBreak",
    "RunOutcome",
    "SettleHow",
    "ledger_middleware",
]
