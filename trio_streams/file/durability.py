"""When a stream file's writes reach the disk: the durability setting and the syncs it makes.

A write puts messages in the operating system's page cache: readers see them at once, and they
survive the writing process being killed, but not the machine losing power or crashing. Only a
sync makes them durable. The setting says when a writer syncs, and so what a receipt promises:

- ``"publish"``: every write-out (each ``publish``, each batch of ``publish_many``, each
  ``flush``) is synced before it returns: a receipt is given once its message is on disk.
- ``"interval"``: a write is synced at most ``sync_interval`` seconds after it, by the writer's
  background sync (:meth:`~trio_streams.file.writer.StreamWriter.keep_synced`, which a
  ``FileBroker`` runs) or by the first write-out that finds the last sync that old: a power loss
  loses at most the receipts of the last ``sync_interval`` seconds.
- ``"close"``: only closing syncs; a power loss may lose every receipt given since the writer
  opened.

The sync is ``fdatasync`` where the system has it (Linux): it writes the file's data and the
metadata needed to read it back — its size, which every append changes — and skips the times
``fsync`` would also write, one journal commit fewer on most file systems. Where ``fdatasync``
is missing, ``fsync``. A writer that created its file also syncs the directory once, so the
file's name survives with its contents.
"""

from __future__ import annotations

import math
import os
from typing import Final, Literal, get_args

from ..core.errors import ConfigurationError

__all__ = [
    "DEFAULT_DURABILITY",
    "DEFAULT_SYNC_INTERVAL",
    "Durability",
    "DurabilitySettingError",
    "check_durability",
    "stronger",
    "sync_data",
    "sync_directory",
]

Durability = Literal["publish", "interval", "close"]

#: The setting used unless another is given (chosen by measurement: see the stream-files guide).
DEFAULT_DURABILITY: Final[Durability] = "interval"
#: Seconds of receipts at risk with ``"interval"`` unless ``sync_interval`` says otherwise.
DEFAULT_SYNC_INTERVAL: Final = 1.0

_CHOICES: Final = get_args(Durability)
#: Strongest first.
_STRENGTH: Final = {"publish": 2, "interval": 1, "close": 0}


class DurabilitySettingError(ConfigurationError):
    """A durability setting that cannot work; :attr:`parameter` names the argument at fault."""

    def __init__(self, message: str, *, parameter: str, value: object) -> None:
        self.parameter = parameter
        self.value = value
        super().__init__(f"{parameter}: {message}")


def check_durability(durability: object, sync_interval: object) -> tuple[Durability, float]:
    """``(durability, sync_interval)`` checked, the interval defaulted (``inf`` unless
    ``"interval"``); raises :class:`DurabilitySettingError` naming the parameter at fault."""
    if not isinstance(durability, str) or durability not in _CHOICES:
        raise DurabilitySettingError(
            f"must be one of {', '.join(map(repr, _CHOICES))}, not {durability!r}",
            parameter="durability",
            value=durability,
        )
    if sync_interval is None:
        interval = DEFAULT_SYNC_INTERVAL if durability == "interval" else math.inf
        return durability, interval  # type: ignore[return-value]  # checked against _CHOICES
    if durability != "interval":
        raise DurabilitySettingError(
            f"applies only to durability='interval', not to durability={durability!r}",
            parameter="sync_interval",
            value=sync_interval,
        )
    if isinstance(sync_interval, bool) or not isinstance(sync_interval, int | float):
        raise DurabilitySettingError(
            f"takes seconds, not {sync_interval!r}", parameter="sync_interval", value=sync_interval
        )
    if not 0 < sync_interval < math.inf:
        raise DurabilitySettingError(
            f"must be a finite number of seconds above 0, not {sync_interval!r}",
            parameter="sync_interval",
            value=sync_interval,
        )
    return "interval", float(sync_interval)


def stronger(
    current: tuple[Durability, float], wanted: tuple[Durability, float]
) -> tuple[Durability, float]:
    """The setting that keeps both promises: the stronger kind, the shorter interval."""
    kind = max(current[0], wanted[0], key=_STRENGTH.__getitem__)
    return kind, min(current[1], wanted[1])


#: The data sync (see the module docs); a name of this module, so it can be counted in tests.
_sync: Final = getattr(os, "fdatasync", os.fsync)


def sync_data(fd: int) -> None:
    """Make what was written to ``fd`` durable (blocking: seconds on a busy disk)."""
    _sync(fd)


def sync_directory(path: str) -> None:
    """Make the entries of the directory holding ``path`` durable (its new file's name)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
