"""The beacon survey: find the pair of beacons that brackets a sequence number or an instant.

Pure logic, driven by the caller: ask :meth:`Survey.next_probe` which beacon to read, hand the
beacon back to :meth:`Survey.observe`, repeat until it answers None, then read
:attr:`Survey.left`. Every beacon names, per stream, the highest sequence number and timestamp
written so far; a beacon whose marker is still below the target is "left" of it, one at or past
it is "right", and a beacon that does not mention the stream (markers rotate when a file has more
streams than slots) is undecided and simply skipped. Upstream probes in random order; this probes
the beacon nearest the middle of what is left, which finds the same (tightest) bracket
deterministically.

Cost. A decided probe halves the range; an undecided one rules out only itself, so a file whose
beacons never mention the stream (an absent key, another shard, an interval too small for any
marker) costs one probe per beacon. Finding the undecided-free beacon nearest the middle must not
rescan the undecided ones each time: they are kept in two disjoint-set forests (one pointing up,
one down) with path compression, so all the probes of a survey cost O(beacons · log beacons)
pointer hops at worst and close to O(beacons) in practice. :attr:`Survey.steps` counts them.

Shards. ``shard`` None means "any shard of the key": a beacon is right if any marker of the key
is at or past the target, left if it carries markers of the key and all of them are before it,
undecided otherwise. That is exact when the key lives in one shard (every writer's default) and
when each beacon has room for every stream. With a key spread over several shards and markers
rotating, a beacon may mention only some of the key's shards and be called left although a shard
it does not mention already reached the target before it; the seek then lands on a later message
of the key with seq ≥ n (or ts > t) than the first in file order, never on one that misses the
target. Pass the shard to be exact.
"""

from __future__ import annotations

import enum

from ..core.positions import Position, PositionKind
from .format import Beacon, Marker


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


def markers_of(beacon: Beacon, key: str, shard: int | None) -> list[Marker]:
    """The markers of ``beacon`` for stream ``key`` in ``shard`` (None: in any shard)."""
    return [
        m for m in beacon.markers if m.stream_key == key and (shard is None or m.shard == shard)
    ]


def classify(beacon: Beacon | None, target: Position, key: str, shard: int | None) -> Verdict:
    """Where ``target`` lies relative to ``beacon`` for stream ``key`` in ``shard`` (None: any).

    Right if any marker of the stream is at or past the target, left if the beacon has markers
    of the stream and all of them are before it, undecided otherwise.
    """
    if beacon is None:
        return Verdict.UNDECIDED
    value = target_value(target)
    by_seq = target.kind is PositionKind.SEQUENCE
    mentioned = False
    for marker in markers_of(beacon, key, shard):
        if (marker.seq >= value) if by_seq else (marker.timestamp_ms > value):
            return Verdict.RIGHT
        mentioned = True
    return Verdict.LEFT if mentioned else Verdict.UNDECIDED


class Survey:
    """Brackets ``target`` between beacons 1..``max_index`` (index i sits at byte i·interval)."""

    def __init__(self, target: Position, key: str, shard: int | None, max_index: int) -> None:
        if target.kind not in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
            raise ValueError(f"a survey looks for a sequence number or an instant, not {target}")
        self.target = target
        self.key = key
        self.shard = shard
        #: Highest beacon known to lie before the target (0: the start of the file).
        self.left = 0
        #: Lowest beacon known to lie after the target (None: none found).
        self.right: int | None = None
        #: What the beacon at :attr:`left` says of the stream, if anything: (highest seq,
        #: highest timestamp_ms) over its markers of the stream.
        self.left_marker: tuple[int, int] | None = None
        #: Beacons handed out by :meth:`next_probe`.
        self.probes = 0
        #: Work done by :meth:`next_probe`: one per call plus one per pointer followed over
        #: undecided beacons (the quantity a cost bound is stated in).
        self.steps = 0
        self._hi = max_index + 1
        # Undecided beacons, as two disjoint-set forests: _up[i] leads to a higher index and
        # _down[i] to a lower one; following either from i ends at the nearest beacon on that
        # side that is not undecided.
        self._up: dict[int, int] = {}
        self._down: dict[int, int] = {}
        self._first = [i for i in dict.fromkeys((1, max_index)) if i >= 1]

    def _nearest(self, links: dict[int, int], index: int) -> int:
        """The first beacon from ``index`` (inclusive) along ``links`` that is not undecided."""
        root = index
        while root in links:
            root = links[root]
            self.steps += 1
        while index != root:  # path compression: the next search jumps straight to root
            following = links[index]
            links[index] = root
            index = following
        return root

    def first_probe(self) -> int | None:
        """The first and last beacons, probed before the bisection (once each, if useful)."""
        while self._first:
            index = self._first.pop(0)
            if self.left < index < self._hi and index not in self._up:
                self.probes += 1
                return index
        return None

    def next_probe(self) -> int | None:
        """The next beacon index to read, or None when the bracket is as tight as it gets."""
        self.steps += 1
        if (first := self.first_probe()) is not None:
            return first
        lo, hi = self.left, self._hi
        if hi - lo < 2:
            return None
        middle = (lo + hi) // 2
        below = self._nearest(self._down, middle)
        above = below if below == middle else self._nearest(self._up, middle)
        # The nearest to the middle wins; on a tie, the lower one.
        if below > lo and (above >= hi or middle - below <= above - middle):
            self.probes += 1
            return below
        if above < hi:
            self.probes += 1
            return above
        return None

    def observe(self, index: int, beacon: Beacon | None) -> Verdict:
        """Record what beacon ``index`` says (None: missing or unreadable, i.e. undecided)."""
        verdict = classify(beacon, self.target, self.key, self.shard)
        if verdict is Verdict.LEFT and index > self.left:
            assert beacon is not None
            markers = markers_of(beacon, self.key, self.shard)
            self.left = index
            self.left_marker = (
                max(m.seq for m in markers),
                max(m.timestamp_ms for m in markers),
            )
        elif verdict is Verdict.RIGHT and index < self._hi:
            self._hi = index
            self.right = index
        elif index not in self._up:
            self._up[index] = index + 1
            self._down[index] = index - 1
        return verdict
