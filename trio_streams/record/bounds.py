"""Where a recording starts and ends: ``--from`` / ``--until`` as ``XRANGE`` bounds.

Both take an entry id (``1700000000000-3``, or ``1700000000000`` for every entry of that
millisecond) or ``ts:MS``. Ids are inclusive at both ends, as ``XRANGE`` reads them. ``ts:MS``
means what it means everywhere in trio-streams (``trio-streams file decode --from ts:MS``,
``Position.timestamp``): ``--from ts:MS`` starts at the first entry strictly later than ``MS``,
and ``--until ts:MS`` ends with the last entry at or before ``MS``, so ``--from ts:A --until
ts:B`` covers the instants ``(A, B]``. ``--from end`` records only entries added after the
recording started (with ``--follow``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import final

from ..core.errors import ConfigurationError
from ..core.positions import MAX_SEQUENCE

__all__ = ["BoundError", "StreamBounds", "parse_bounds"]

_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")
_TS = re.compile(r"ts:(\d{1,20})")
_U64 = (1 << 64) - 1


class BoundError(ConfigurationError):
    """A ``--from`` / ``--until`` that is not an entry id or ``ts:MS`` (the message says which)."""


@final
@dataclass(frozen=True, slots=True)
class StreamBounds:
    """Inclusive ``XRANGE`` bounds (``-`` / ``+`` for open ends); ``start`` is None for
    ``--from end`` (only entries added from now on)."""

    start: str | None
    end: str

    @property
    def from_end(self) -> bool:
        return self.start is None


def _id(text: str, option: str) -> tuple[int, int | None]:
    match = _ID.fullmatch(text)
    if match is None:
        raise BoundError(
            f"{option} {text!r}: expected an entry id (MS-SEQ or MS) or ts:MS"
            + (", or end" if option == "--from" else "")
        )
    ms = int(match[1])
    seq = None if match[2] is None else int(match[2])
    if ms > _U64 or (seq is not None and seq > MAX_SEQUENCE):
        raise BoundError(f"{option} {text!r}: an entry id's parts are 64-bit numbers")
    return ms, seq


def parse_bounds(start: str | None, until: str | None) -> StreamBounds:
    """The bounds of ``--from START`` and ``--until UNTIL`` (None: the whole stream)."""
    if start is None or start == "-":
        low: str | None = "-"
    elif start == "end":
        low = None
    elif (ts := _TS.fullmatch(start)) is not None:
        ms = int(ts[1])
        if ms >= _U64:
            raise BoundError(f"--from {start!r}: no entry is later than that")
        low = f"{ms + 1}-0"
    else:
        ms, seq = _id(start, "--from")
        low = f"{ms}-{0 if seq is None else seq}"
    if until is None or until == "+":
        high = "+"
    elif (ts := _TS.fullmatch(until)) is not None:
        high = f"{min(int(ts[1]), _U64)}-{MAX_SEQUENCE}"
    else:
        ms, seq = _id(until, "--until")
        high = f"{ms}-{MAX_SEQUENCE if seq is None else seq}"
    if low not in (None, "-") and high != "+" and _key(low) > _key(high):
        raise BoundError(f"--from {start} comes after --until {until}: nothing to record")
    return StreamBounds(low, high)


def _key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)
