"""What became of a workload's messages, from the kit's ledger, and the row it makes.

The workload records what it published in the kit's ledger
(:class:`~trio_streams.testing.faults.Ledger`), the consumers (``tests.chaos.consumer``) record
each handler run and settle in it (``ledger_middleware``), and the workload asks the server (or
the file) what is still unsettled; the ledger's check of those makes the row:

- **lost**: published, neither handled to its end nor still pending — gone;
- **settled without a run**: published, no longer pending, and no handler run ever began;
- **duplicates**: handler runs beyond the first of each message (a run that asked for a retry
  excepted);
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

from trio_streams.testing.faults import LedgerReport


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
    #: The faults are another row's too (the same writers' crashes): left out of the sum by
    #: kind under the table.
    faults_shared: bool = False
    #: What was wrong, one note per defect (the numbers behind a non-zero column).
    notes: list[str] = field(default_factory=list)

    @property
    def defects(self) -> list[str]:
        """What this row shows the contract broke, one line each (its notes name message ids);
        empty when it held."""
        found = list(self.notes)
        if self.lost and not any(" lost " in note for note in found):
            found.append(f"{self.transport}: {self.lost} lost")
        if self.settled_without_run and not any("without a run" in n for n in found):
            found.append(
                f"{self.transport}: {self.settled_without_run} settled without a handler run"
            )
        if self.effects_must_be_once and self.effects_twice:
            found.append(f"{self.transport}: {self.effects_twice} effects applied twice")
        return found


def row_from(
    transport: str,
    report: LedgerReport,
    *,
    faults: Counter[str],
    at_most_once: bool = False,
    counts_effects: bool = False,
    effects_must_be_once: bool = False,
    effects: Mapping[int | str, int] | None = None,
    lanes: bool = False,
) -> Row:
    """The row of a finished workload from its ledger's report (checked with what the server
    still held). On an at-most-once transport a message taken off the server that no handler
    ran (a consumer killed between its pop and its run) is the contract's drop too: it is
    counted with the drops, not as settled without a run. ``effects`` (the hash's counts) with
    ``effects_must_be_once``: a message acknowledged whose effect was never applied is a
    defect too."""
    without_run = report.settled_without_run
    row = Row(
        transport=transport,
        faults=faults,
        messages=len(report.published),
        lost=len(report.lost),
        settled_without_run=0 if at_most_once else len(without_run),
        duplicates=report.duplicate_runs,
        order_breaks=len(report.order_breaks) if lanes else None,
        effects_twice=len(report.effects_twice) if counts_effects else None,
        dropped=len(report.dropped_as_allowed | without_run) if at_most_once else None,
        effects_must_be_once=effects_must_be_once,
    )
    if report.lost:
        row.notes.append(f"{transport}: lost {_some(report.lost)}")
    if without_run and not at_most_once:
        row.notes.append(f"{transport}: settled without a run {_some(without_run)}")
    if report.unknown:
        row.notes.append(f"{transport}: {len(report.unknown)} unknown ids run or settled")
    if effects_must_be_once and effects is not None:
        # Applied with its acknowledgement or not at all: acknowledged means applied.
        unapplied = {n for n in report.published - report.pending if not effects.get(n)}
        if unapplied:
            row.notes.append(
                f"{transport}: acknowledged without its effect applied {_some(unapplied)}"
            )
    if report.pending and not at_most_once:
        row.notes.append(f"{transport}: still pending at the end {_some(report.pending)}")
    return row


def _some(ids: set[int] | set[int | str]) -> str:
    shown = sorted(ids, key=str)[:5]
    return f"{len(ids)}, e.g. {shown}"


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
        if not r.faults_shared:
            kinds.update(r.faults)
    lines.append("")
    lines.append("faults by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return "\n".join(lines)
