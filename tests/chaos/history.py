"""What a workload's consumers ran, read back from their run log, and the row it makes.

The consumers (``tests.chaos.consumer``) append ``run <n> <attempt> <pid>`` as each handler
run begins and ``done <n>`` as it returns. The workload knows what it published and asks the
server (or the file) what is still unsettled; from those three the row is computed:

- **lost**: published, neither handled to its end nor still pending — gone;
- **settled without a run**: published, no longer pending, and no handler run ever began;
- **duplicates**: handler runs beyond the first of each message;
- **order breaks**: within an ordered lane, a message first seen before one published ahead of
  it in the same lane (only where the transport promises an order);
- **effects twice**: messages whose side effect (a hash field the handler's segment
  increments) was applied more than once.

On an at-most-once transport (Pub/Sub, simple lists) what is lost or was settled without a run
is the contract's drop: it is reported in its own column and is not a defect.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Runs:
    """The run log of one workload: runs begun per message, messages whose run returned, and
    the order in which messages were first run."""

    begun: Counter[int] = field(default_factory=Counter)
    done: set[int] = field(default_factory=set)
    first_seen: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Runs:
        runs = cls()
        if not path.exists():
            return runs
        for line in path.read_bytes().splitlines():
            parts = line.split()
            if parts[:1] == [b"run"] and len(parts) == 4:
                n = int(parts[1])
                if n not in runs.begun:
                    runs.first_seen.append(n)
                runs.begun[n] += 1
            elif parts[:1] == [b"done"] and len(parts) == 2:
                runs.done.add(int(parts[1]))
        return runs


def order_breaks(seen: Iterable[int], lane_of: Mapping[int, str]) -> int:
    """How many messages were first seen after a later-published message of their lane (lanes
    hold messages in publishing order: a greater number was published later)."""
    latest: dict[str, int] = {}
    breaks = 0
    for n in seen:
        lane = lane_of.get(n)
        if lane is None:
            continue
        if n < latest.get(lane, -1):
            breaks += 1
        else:
            latest[lane] = n
    return breaks


@dataclass
class Row:
    """One transport's line of the campaign's table."""

    transport: str
    faults: Counter[str]
    messages: int
    lost: int
    settled_without_run: int
    duplicates: int
    #: ``None``: the workload has no ordered lane.
    order_breaks: int | None = None
    #: ``None``: the handler has no side effect counted.
    effects_twice: int | None = None
    #: At-most-once drops (lost or settled without a run, as the contract allows); ``None``:
    #: the transport promises every message.
    dropped: int | None = None
    #: Side effects that must be applied exactly once and were applied more (atomic window).
    effects_must_be_once: bool = False
    #: What was wrong, one note per defect (the numbers behind a non-zero column).
    notes: list[str] = field(default_factory=list)

    @property
    def defects(self) -> list[str]:
        """What this row shows the contract broke; empty when it held."""
        found = list(self.notes)
        if self.lost:
            found.append(f"{self.transport}: {self.lost} lost")
        if self.settled_without_run:
            found.append(
                f"{self.transport}: {self.settled_without_run} settled without a handler run"
            )
        if self.effects_must_be_once and self.effects_twice:
            found.append(f"{self.transport}: {self.effects_twice} effects applied twice")
        return found


def row_from(
    transport: str,
    *,
    faults: Counter[str],
    published: set[int],
    runs: Runs,
    pending: set[int],
    at_most_once: bool = False,
    effects: Mapping[int, int] | None = None,
    effects_must_be_once: bool = False,
    lanes: Mapping[int, str] | None = None,
    also_settled: set[int] = frozenset(),  # type: ignore[assignment]
) -> Row:
    """The row of a finished workload. ``pending``: published messages the transport still
    holds unsettled (to be delivered again); ``also_settled``: messages settled another way
    than by a handler run that the contract allows (none so far)."""
    settled = published - pending
    without_run = {n for n in settled if runs.begun[n] == 0} - also_settled
    lost = published - runs.done - pending - without_run
    duplicates = sum(count - 1 for n, count in runs.begun.items() if count > 1 and n in published)
    twice = None if effects is None else sum(1 for v in effects.values() if v > 1)
    row = Row(
        transport=transport,
        faults=faults,
        messages=len(published),
        lost=0 if at_most_once else len(lost | pending),
        settled_without_run=0 if at_most_once else len(without_run),
        duplicates=duplicates,
        order_breaks=None if lanes is None else order_breaks(runs.first_seen, lanes),
        effects_twice=twice,
        dropped=len(lost | without_run | pending) if at_most_once else None,
        effects_must_be_once=effects_must_be_once,
    )
    if not at_most_once:
        if pending:
            row.notes.append(f"{transport}: {len(pending)} still pending at the end")
        if lost:
            row.notes.append(f"{transport}: lost e.g. {sorted(lost)[:5]}")
        if without_run:
            row.notes.append(f"{transport}: settled without a run e.g. {sorted(without_run)[:5]}")
    if effects is not None and effects_must_be_once:
        missing = {n for n in runs.done if effects.get(n, 0) == 0} - pending
        if missing:
            row.notes.append(
                f"{transport}: {len(missing)} handled and settled without their effect, "
                f"e.g. {sorted(missing)[:5]}"
            )
    return row


def table(rows: list[Row]) -> str:
    """The campaign's printed table, one line per transport."""
    head = (
        "transport",
        "faults",
        "messages",
        "lost",
        "settled w/o run",
        "duplicates",
        "order breaks",
        "effects twice",
        "dropped (at most once)",
    )

    def cell(value: int | None) -> str:
        return "-" if value is None else str(value)

    body = [
        (
            r.transport,
            str(sum(r.faults.values())),
            str(r.messages),
            str(r.lost),
            str(r.settled_without_run),
            str(r.duplicates),
            cell(r.order_breaks),
            cell(r.effects_twice),
            cell(r.dropped),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            text.ljust(width) if i == 0 else text.rjust(width)
            for i, (text, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    kinds: Counter[str] = Counter()
    for r in rows:
        kinds.update(r.faults)
    lines.append("")
    lines.append("faults by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return "\n".join(lines)
