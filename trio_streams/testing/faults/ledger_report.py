"""What the ledger's checker found: a value a test asserts on, and one block it prints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias, final

__all__ = ["LedgerReport", "OrderBreak"]

_Id: TypeAlias = int | str
#: How many ids a line of the block names before "and N more".
_SHOWN = 8


@final
@dataclass(frozen=True, slots=True)
class OrderBreak:
    """In ``lane``, message ``id`` began its first run before the first run of ``ahead_of``,
    which was published before it in the same lane."""

    lane: int | str
    id: int | str
    ahead_of: int | str


@final
@dataclass(frozen=True, repr=False)
class LedgerReport:
    """What became of every published message. Each field is a set (or mapping) of message ids,
    so a test asserts on exactly what it expects (``report.lost == set()``); :attr:`ok` sums
    up the defects, and :meth:`block` (also ``str(report)``) is the one block to print.

    Runs are counted from ``run`` records, less those ended ``"not-run"``: a run the process
    was killed in counts.
    """

    #: The ledger file.
    path: Path
    #: Every message a producer recorded as published.
    published: set[_Id]
    #: Messages a handler run of which ended with ``ack``.
    handled: set[_Id]
    #: Handler runs per message.
    runs: Counter[_Id]
    #: The attempt each run of a message saw, in the order the runs began.
    attempts: dict[_Id, list[int]]
    #: Published, never handled, not dead-lettered, not dropped on purpose, and not pending.
    lost: set[_Id]
    #: What would be lost, on a transport that may lose messages (``at_most_once=True``).
    dropped_as_allowed: set[_Id]
    #: Settled for good (recorded, or no longer pending) though no handler run of it began.
    settled_without_run: set[_Id]
    #: Per message, runs beyond the first that its own runs did not ask for: each run ended
    #: ``"retry"`` asks for one more; a run killed, cut or cancelled under way asks for none.
    duplicates: dict[_Id, int]
    #: Within a lane, messages whose first run began before that of one published earlier.
    order_breaks: list[OrderBreak]
    #: Messages whose effect was applied more than once, with how often.
    effects_twice: dict[_Id, int]
    #: Handled messages (a run returned ``ack``) whose effect was never applied, not
    #: dead-lettered and not pending: lost in substance. Checked when effects are counted.
    effects_missing: set[_Id]
    dead_lettered: set[_Id]
    #: Settled as dropped (the handler's or the failure policy's decision).
    dropped: set[_Id]
    #: What the server still held, as the check was given it.
    pending: set[_Id]
    #: Messages run, settled or affected that no producer recorded: garbled or invented.
    unknown: set[_Id]
    #: The published messages in publish order (to list ids in a readable order).
    order: list[_Id] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """Nothing lost, settled without a run, run out of order, applied twice or never,
        or unknown.

        Duplicate runs do not fail it: at-least-once delivery allows them after a crash or a
        cut; a test that promises none asserts ``report.duplicates == {}``."""
        return not (
            self.lost
            or self.settled_without_run
            or self.order_breaks
            or self.effects_twice
            or self.effects_missing
            or self.unknown
        )

    @property
    def duplicate_runs(self) -> int:
        """All duplicate runs, summed."""
        return sum(self.duplicates.values())

    def block(self) -> str:
        """The report as one block of text, a line per finding, ids of each named."""
        runs = sum(self.runs.values())
        lines = [
            f"ledger {self.path}: {len(self.published)} published, {len(self.handled)} "
            f"handled, {runs} handler run{'' if runs == 1 else 's'}"
        ]
        lines.append(self._line("lost", self.lost))
        if self.dropped_as_allowed:
            lines.append(self._line("dropped, as the transport allows", self.dropped_as_allowed))
        lines.append(self._line("settled without a run", self.settled_without_run))
        lines.append(
            f"  {'duplicates':<33}{self.duplicate_runs}"
            + (
                f" (runs beyond the first, of {len(self.duplicates)} message"
                f"{'' if len(self.duplicates) == 1 else 's'}: "
                + self._ids(self.duplicates, lambda i: f"{i} +{self.duplicates[i]}")
                + ")"
                if self.duplicates
                else ""
            )
        )
        breaks = self.order_breaks
        lines.append(
            f"  {'order breaks':<33}{len(breaks)}"
            + (
                ": "
                + ", ".join(f"{b.id} before {b.ahead_of} in {b.lane}" for b in breaks[:_SHOWN])
                + (f" and {len(breaks) - _SHOWN} more" if len(breaks) > _SHOWN else "")
                if breaks
                else ""
            )
        )
        twice = self.effects_twice
        lines.append(
            f"  {'effects applied twice':<33}{len(twice)}"
            + (": " + self._ids(twice, lambda i: f"{i} x{twice[i]}") if twice else "")
        )
        if self.effects_missing:
            lines.append(self._line("effects never applied", self.effects_missing))
        if self.unknown:
            lines.append(self._line("unknown (never published)", self.unknown))
        lines.append(
            f"  dead-lettered {len(self.dead_lettered)}, dropped {len(self.dropped)}, "
            f"pending {len(self.pending)}"
        )
        lines.append("  OK" if self.ok else f"  FAILED: {', '.join(self._failures())}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.block()

    def __repr__(self) -> str:
        found = ", ".join(self._failures()) or "nothing wrong"
        return f"<LedgerReport {len(self.published)} published, ok={self.ok}: {found}>"

    def _failures(self) -> list[str]:
        found = [
            ("lost", len(self.lost)),
            ("settled without a run", len(self.settled_without_run)),
            ("order breaks", len(self.order_breaks)),
            ("effects applied twice", len(self.effects_twice)),
            ("effects never applied", len(self.effects_missing)),
            ("unknown", len(self.unknown)),
        ]
        return [f"{what} {count}" for what, count in found if count]

    def _line(self, what: str, ids: Collection[_Id]) -> str:
        return f"  {what:<33}{len(ids)}" + (f": {self._ids(ids, str)}" if ids else "")

    def _ids(self, ids: Iterable[_Id], show: Callable[[_Id], str]) -> str:
        rank = {ident: index for index, ident in enumerate(self.order)}
        ordered = sorted(ids, key=lambda i: (rank.get(i, len(rank)), str(i)))
        text = ", ".join(str(show(i)) for i in ordered[:_SHOWN])
        if len(ordered) > _SHOWN:
            text += f" and {len(ordered) - _SHOWN} more"
        return text
