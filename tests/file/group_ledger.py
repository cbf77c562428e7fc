"""What the fault kit's ledger does not check for a consumer group: runs at once, and by whom.

:class:`~trio_streams.testing.faults.Ledger` reports lost messages, settles without a run,
duplicates and order breaks; it does not say whether two runs of one message were under way at
the same time (by two members), nor which process ran what. :func:`overlaps` reads the same file
for that: each run lasts from its ``run`` record to its ``ended`` record, or to its process's
death, whose place in the ledger the test gives (a killed process writes nothing after it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Overlap", "Run", "overlaps", "read_runs"]

#: The end of a run that never ended (its process neither ended it nor died).
NEVER = float("inf")


@dataclass(frozen=True, slots=True)
class Run:
    """One handler run: its message, attempt and process, and where in the ledger (in bytes) it
    began and ended (``NEVER``: it did not). ``outcome`` is None for a run its process died in;
    ``settled``: its process recorded the message settled after it."""

    id: str
    attempt: int
    pid: int
    began: int
    ended: float
    outcome: str | None
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two runs of one message (or, ordered, of one key) under way at once."""

    what: str
    first: Run
    second: Run


def read_runs(path: Path, deaths: Mapping[int, int] | None = None) -> list[Run]:
    """Every run recorded in the ledger ``path`` (runs taken back as ``not-run`` left out), in
    the order they began. ``deaths`` maps a killed process to the ledger's size when it had
    died: its runs not ended end there."""
    deaths = deaths or {}
    begun: list[tuple[str, int, int, int]] = []  # id, attempt, pid, offset
    ends: dict[int, tuple[float, str]] = {}
    settles: set[int] = set()
    open_runs: dict[tuple[int, str], list[int]] = {}
    latest: dict[tuple[int, str], int] = {}
    offset = 0
    with path.open("rb") as file:
        for line in file:
            here, offset = offset, offset + len(line)
            if not line.endswith(b"\n"):
                break  # a record being written
            record = json.loads(line)
            kind, ident, pid = record["t"], record["id"], record.get("pid", 0)
            if kind == "run":
                open_runs.setdefault((pid, ident), []).append(len(begun))
                latest[(pid, ident)] = len(begun)
                begun.append((ident, int(record.get("a", 1)), pid, here))
            elif kind == "ended":
                runs = open_runs.get((pid, ident))
                if runs:
                    ends[runs.pop()] = (here, record["o"])
            elif kind == "settled" and (pid, ident) in latest:
                settles.add(latest[(pid, ident)])
    result = []
    for index, (ident, attempt, pid, began) in enumerate(begun):
        end, outcome = ends.get(index, (float(deaths.get(pid, NEVER)), None))
        if outcome == "not-run":
            continue
        result.append(Run(ident, attempt, pid, began, end, outcome, index in settles))
    return result


def overlaps(runs: list[Run], *, by: Callable[[Run], str] = lambda run: run.id) -> list[Overlap]:
    """Pairs of runs of the same ``by(run)`` (the message, by default) under way at once: one
    began before the other ended."""
    found = []
    latest: dict[str, Run] = {}  # per group of runs, the one that ends last so far
    for run in runs:  # in the order they began
        what = by(run)
        before = latest.get(what)
        if before is not None and before.ended > run.began:
            found.append(Overlap(what, before, run))
        if before is None or run.ended > before.ended:
            latest[what] = run
    return found
