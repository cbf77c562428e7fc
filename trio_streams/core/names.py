"""Names a command line gives that are not there: one error, listing what is there.

A typo in a stream key, a stream or a group would otherwise select nothing and succeed quietly
(``replayed 0 messages``, an empty table). The error names what was asked for, where it was
looked for, and the names that are there, closest first (``difflib``), so the fix is in sight.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from .errors import TrioStreamsError

__all__ = ["NameNotFound", "check_names", "closest_first", "listing"]

#: Names listed at most; the rest are counted.
_LISTED = 10


class NameNotFound(TrioStreamsError):
    """A key, stream or group named on the command line is not where it was looked for."""

    def __init__(self, message: str, *, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        #: The names asked for that are not there.
        self.missing = missing


def closest_first(name: str, present: Iterable[str]) -> list[str]:
    """``present``, the names most like ``name`` first (ties by name)."""
    return sorted(
        present,
        key=lambda other: (-difflib.SequenceMatcher(None, name, other).ratio(), other),
    )


def check_names(what: str, given: Iterable[str], present: Collection[str], where: str) -> None:
    """Raise :class:`NameNotFound` unless every name in ``given`` is in ``present``.

    ``what`` is the kind of name (``stream key``), ``where`` where it was looked for.
    """
    missing = list(dict.fromkeys(name for name in given if name not in present))
    if not missing:
        return
    asked = ", ".join(repr(name) for name in missing)
    plural = "s" if len(missing) > 1 else ""
    if not present:
        raise NameNotFound(
            f"no {what}{plural} {asked} in {where}, which has none", missing=tuple(missing)
        )
    raise NameNotFound(
        f"no {what}{plural} {asked} in {where}; there: {listing(missing[0], present)}",
        missing=tuple(missing),
    )


def listing(name: str, present: Iterable[str]) -> str:
    """The names in ``present``, quoted, closest to ``name`` first; past ten, counted."""
    listed = closest_first(name, present)
    shown = ", ".join(repr(other) for other in listed[:_LISTED])
    more = f" and {len(listed) - _LISTED} more" if len(listed) > _LISTED else ""
    return shown + more
