"""The beacon survey as it was before it became amortised: the order oracle of the survey tests
and the "old survey" peer of ``benchmarks/file_seek.py``. Not for use: every probe rescans
outward from the middle past undecided beacons, which is quadratic when none mentions the key."""

from __future__ import annotations

from trio_streams.file.survey import Survey


class RescanningSurvey(Survey):
    """The same probe order as :class:`Survey`, found by rescanning on every probe."""

    def next_probe(self) -> int | None:
        if (first := self.first_probe()) is not None:
            return first
        lo, hi = self.left, self._hi
        middle = (lo + hi) // 2
        for distance in range(hi - lo):
            for index in (middle - distance, middle + distance):
                if lo < index < hi and index not in self._up:
                    self.probes += 1
                    return index
        return None
