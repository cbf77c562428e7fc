"""Faults as a feature: a Redis fault proxy, process and file faults, and a history checker.

See docs/guides/testing-under-faults.md.
"""

from .processes import (
    AppProcess,
    AppProcessError,
    KillPoint,
    KillPointMissed,
    KillPointNotReached,
    UnexpectedExit,
)

__all__: list[str] = [
    "AppProcess",
    "AppProcessError",
    "KillPoint",
    "KillPointMissed",
    "KillPointNotReached",
    "UnexpectedExit",
]
