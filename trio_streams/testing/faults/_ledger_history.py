"""The ledger's records read back, folded as they are read, and checked.

The file is read incrementally: each check reads what was appended since the last one, up to
its last newline (a line still being written by another process is left for the next read).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import TrioStreamsError
from .ledger_report import LedgerReport, OrderBreak

__all__ = ["RUN_ENDS", "SETTLES", "History", "Id", "Lane", "LedgerError"]

#: How a run may end, and how a message may be settled, as the ledger writes them.
RUN_ENDS = frozenset({"ack", "drop", "retry", "cancelled", "not-run"})
SETTLES = frozenset({"ack", "dead-letter", "drop"})

#: A message's identity in the ledger: the same value in its publish and in its runs.
Id = int | str
#: An ordered lane (a key, a partition): the order of its messages' first runs is checked.
Lane = int | str


class LedgerError(TrioStreamsError):
    """A record could not be written whole, or the ledger file holds a line that is not one;
    the message names the file (and the line)."""


@dataclass(slots=True)
class _Run:
    id: Id
    attempt: int
    pid: int
    #: The record's line number: the order of events.
    line: int
    outcome: str | None = None


@dataclass(slots=True)
class History:
    """Everything recorded so far, folded as it is read."""

    path: Path
    _offset: int = 0
    _partial: bytes = b""
    _lines: int = 0
    #: First publish of each message: its line, and its lane.
    _published: dict[Id, tuple[int, Lane | None]] = field(default_factory=dict)
    _runs: list[_Run] = field(default_factory=list)
    #: Runs not ended yet, by process and message, oldest first.
    _open: dict[tuple[int, Id], list[_Run]] = field(default_factory=dict)
    _settles: dict[Id, list[str]] = field(default_factory=dict)
    _effects: Counter[Id] = field(default_factory=Counter)
    #: The error of the first line that could not be read: every later read raises it again.
    _broken: LedgerError | None = None

    def read_new(self) -> None:
        """Fold in the whole lines appended since the last read; :class:`LedgerError` naming
        the line for one that is not a record this ledger writes (and again at every later
        read: what follows it cannot be taken for the whole history)."""
        if self._broken is not None:
            raise self._broken
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        complete, _, self._partial = data.rpartition(b"\n")
        if not complete:
            return
        for raw in complete.split(b"\n"):
            self._lines += 1
            try:
                self._fold(self._parse(raw))
            except LedgerError as error:
                self._broken = error
                raise

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise LedgerError(
                f"ledger {self.path}, line {self._lines}: not a record ({exc}): {raw[:80]!r}"
            ) from exc
        if not isinstance(record, dict) or "t" not in record or "id" not in record:
            raise LedgerError(f"ledger {self.path}, line {self._lines}: not a record: {raw[:80]!r}")
        problem = _field_problem(record)
        if problem is not None:
            raise LedgerError(
                f"ledger {self.path}, line {self._lines}: not a record ({problem}): {raw[:80]!r}"
            )
        return record

    def _fold(self, record: dict[str, Any]) -> None:
        kind, ident, line = record["t"], record["id"], self._lines
        if kind == "published":
            self._published.setdefault(ident, (line, record.get("lane")))
        elif kind == "run":
            run = _Run(ident, int(record.get("a", 1)), int(record.get("pid", 0)), line)
            self._runs.append(run)
            self._open.setdefault((run.pid, ident), []).append(run)
        elif kind == "ended":
            self._end(ident, int(record.get("pid", 0)), record.get("a"), str(record["o"]))
        elif kind == "settled":
            self._settles.setdefault(ident, []).append(str(record["how"]))
        elif kind == "effect":
            self._effects[ident] += 1
        else:
            raise LedgerError(f"ledger {self.path}, line {line}: unknown record kind {kind!r}")

    def _end(self, ident: Id, pid: int, attempt: int | None, outcome: str) -> None:
        """End the latest open run of ``ident`` in ``pid`` (of ``attempt``, if given)."""
        runs = self._open.get((pid, ident))
        if not runs:
            return  # an end without its beginning: nothing to end
        for index in range(len(runs) - 1, -1, -1):
            if attempt is None or runs[index].attempt == attempt:
                runs.pop(index).outcome = outcome
                break
        if not runs:
            del self._open[(pid, ident)]

    # ---- the checks --------------------------------------------------------------------------

    def report(
        self,
        *,
        pending: set[Id] | None,
        dead_lettered: set[Id],
        effects: dict[Id, int] | None,
        at_most_once: bool,
    ) -> LedgerReport:
        published = set(self._published)
        runs: Counter[Id] = Counter()
        retries: Counter[Id] = Counter()
        attempts: dict[Id, list[int]] = {}
        first_run: dict[Id, int] = {}
        handled: set[Id] = set()
        for run in self._runs:
            if run.outcome == "not-run":
                continue
            runs[run.id] += 1
            attempts.setdefault(run.id, []).append(run.attempt)
            first_run.setdefault(run.id, run.line)
            if run.outcome == "ack":
                handled.add(run.id)
            elif run.outcome == "retry":
                retries[run.id] += 1
        duplicates = {
            ident: extra
            for ident, count in runs.items()
            if (extra := count - 1 - retries[ident]) > 0
        }
        dead = dead_lettered | {i for i, hows in self._settles.items() if "dead-letter" in hows}
        dropped = {i for i, hows in self._settles.items() if "drop" in hows}
        settled = set(self._settles)
        held = pending or set()
        if pending is not None:
            settled |= published - pending
        missing = published - handled - dead - dropped - held
        counted = effects if effects is not None else dict(self._effects)
        # Handled (a run returned ack) yet never applied: the ack's transaction never happened.
        never_applied = (
            {i for i in handled - dead - held if counted.get(i, 0) == 0}
            if effects is not None or self._effects
            else set()
        )
        seen = set(runs) | set(self._settles) | {i for i, n in counted.items() if n > 0}
        return LedgerReport(
            path=self.path,
            published=published,
            handled=handled,
            runs=runs,
            attempts=attempts,
            lost=set() if at_most_once else missing,
            dropped_as_allowed=missing if at_most_once else set(),
            settled_without_run={i for i in settled if runs[i] == 0},
            duplicates=duplicates,
            order_breaks=self._order_breaks(first_run),
            effects_twice={i: n for i, n in counted.items() if n > 1},
            effects_missing=never_applied & published,
            dead_lettered=dead,
            dropped=dropped,
            pending=set(held),
            unknown=seen - published,
            order=[i for i, _ in sorted(self._published.items(), key=lambda item: item[1][0])],
        )

    def _order_breaks(self, first_run: dict[Id, int]) -> list[OrderBreak]:
        """Within each lane, in publish order: a message whose first run began before the first
        run of one published before it (messages never run are left out)."""
        lanes: dict[Lane, list[Id]] = {}
        for ident, (_, lane) in sorted(self._published.items(), key=lambda item: item[1][0]):
            if lane is not None:
                lanes.setdefault(lane, []).append(ident)
        breaks = []
        for lane, members in lanes.items():
            latest: tuple[int, Id] | None = None  # the latest first run so far, and whose
            for ident in members:
                began = first_run.get(ident)
                if began is None:
                    continue
                if latest is not None and latest[0] > began:
                    breaks.append(OrderBreak(lane, ident, latest[1]))
                else:
                    latest = (began, ident)
        return breaks


def is_id(value: object) -> bool:
    """Whether ``value`` may be a message's id or a lane: an int or a str, not a bool."""
    return isinstance(value, int | str) and not isinstance(value, bool)


def is_attempt(value: object) -> bool:
    """Whether ``value`` is an attempt number: an int >= 1, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _field_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a record's fields, or None if it is one the ledger writes."""
    kind = record["t"]
    if not is_id(record["id"]):
        return f"its id {record['id']!r} is not an int or a str"
    pid = record.get("pid", 0)
    if isinstance(pid, bool) or not isinstance(pid, int):
        return f"its pid {pid!r} is not an int"
    if kind == "published":
        lane = record.get("lane")
        if lane is not None and not is_id(lane):
            return f"its lane {lane!r} is not an int or a str"
    elif kind == "run":
        if not is_attempt(record.get("a", 1)):
            return f"its attempt {record.get('a')!r} is not an int >= 1"
    elif kind == "ended":
        attempt = record.get("a")
        if attempt is not None and not is_attempt(attempt):
            return f"its attempt {attempt!r} is not an int >= 1"
        if record.get("o") not in RUN_ENDS:
            return f"its outcome {record.get('o')!r} is not one of {sorted(RUN_ENDS)}"
    elif kind == "settled" and record.get("how") not in SETTLES:
        return f"its settle {record.get('how')!r} is not one of {sorted(SETTLES)}"
    return None
