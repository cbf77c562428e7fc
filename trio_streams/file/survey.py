"""The beacon survey: find the pair of beacons that brackets a sequence number or an instant.

Pure logic, driven by the caller: ask :meth:`Survey.next_probe` which beacon to read, hand the
beacon back to :meth:`Survey.observe`, repeat until it answers None, then read
:attr:`Survey.left`. Every beacon names, per stream, the highest sequence number and timestamp
written so far; a beacon whose marker is still below the target is "left" of it, one at or past
it is "right", and a beacon that does not mention the stream (markers rotate when a file has more
streams than slots) is undecided and simply skipped. Upstream probes in random order; this probes
the middle of what is left, which finds the same (tightest) bracket deterministically.
"""

from __future__ import annotations

import enum

from ..positions import Position, PositionKind
from .format import Beacon


class Verdict(enum.Enum):
    LEFT = "left"
    RIGHT = "right"
    UNDECIDED = "undecided"


def target_value(position: Position) -> int:
    """The sequence number or instant a sequence or timestamp position aims at."""
    if position.value is None or position.kind not in (
        PositionKind.SEQUENCE,
        PositionKind.TIMESTAMP,
    ):
        raise ValueError(f"{position!r} is not a sequence number or an instant")
    return position.value


def classify(beacon: Beacon | None, target: Position, key: str, shard: int) -> Verdict:
    """Where ``target`` lies relative to ``beacon`` for the stream (key, shard)."""
    if beacon is not None:
        value = target_value(target)
        for marker in beacon.markers:
            if marker.stream_key == key and marker.shard == shard:
                if target.kind is PositionKind.SEQUENCE:
                    return Verdict.LEFT if marker.seq < value else Verdict.RIGHT
                return Verdict.LEFT if marker.timestamp_ms <= value else Verdict.RIGHT
    return Verdict.UNDECIDED


class Survey:
    """Brackets ``target`` between beacons 1..``max_index`` (index i sits at byte i·interval)."""

    def __init__(self, target: Position, key: str, shard: int, max_index: int) -> None:
        if target.kind not in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
            raise ValueError(f"a survey looks for a sequence number or an instant, not {target}")
        self.target = target
        self.key = key
        self.shard = shard
        #: Highest beacon known to lie before the target (0: the start of the file).
        self.left = 0
        #: Lowest beacon known to lie after the target (None: none found).
        self.right: int | None = None
        #: The marker seen at :attr:`left` for the stream, if any: (seq, timestamp_ms).
        self.left_marker: tuple[int, int] | None = None
        self._hi = max_index + 1
        self._undecided: set[int] = set()
        self._first = [i for i in dict.fromkeys((1, max_index)) if i >= 1]

    def next_probe(self) -> int | None:
        """The next beacon index to read, or None when the bracket is as tight as it gets."""
        while self._first:
            index = self._first.pop(0)
            if self.left < index < self._hi and index not in self._undecided:
                return index
        lo, hi = self.left, self._hi
        middle = (lo + hi) // 2
        for distance in range(hi - lo):
            for index in (middle - distance, middle + distance):
                if lo < index < hi and index not in self._undecided:
                    return index
        return None

    def observe(self, index: int, beacon: Beacon | None) -> Verdict:
        """Record what beacon ``index`` says (None: missing or unreadable, i.e. undecided)."""
        verdict = classify(beacon, self.target, self.key, self.shard)
        if verdict is Verdict.LEFT and index > self.left:
            self.left = index
            assert beacon is not None
            marker = next(
                m for m in beacon.markers if m.stream_key == self.key and m.shard == self.shard
            )
            self.left_marker = (marker.seq, marker.timestamp_ms)
        elif verdict is Verdict.RIGHT and index < self._hi:
            self._hi = index
            self.right = index
        else:
            self._undecided.add(index)
        return verdict
