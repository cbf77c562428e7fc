"""The tables of ``trio-streams top``: cells computed once, printed as text or drawn by rich.

:func:`stream_table`, :func:`consumer_table`, :func:`file_table` and :func:`group_table` give a
header and rows of strings; :func:`as_text` aligns them in columns (``--once``: stable,
greppable output), and the live view hands the same cells to rich. Sorting and filtering happen
here too, so both views agree.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any

from ..file.groups import GroupInfo
from .rates import FileRow, StreamRow

__all__ = [
    "SORTS",
    "as_text",
    "consumer_table",
    "file_table",
    "group_table",
    "select",
    "stream_table",
    "unreadable_group_table",
]

Table = tuple[list[str], list[list[str]]]

#: Sort orders of the stream table, in the order the ``s`` key cycles through them.
SORTS: dict[str, Callable[[StreamRow], Any]] = {
    "name": lambda row: row.key,
    "length": lambda row: -row.length,
    "rate": lambda row: -(row.added_per_s or 0.0),
    "pending": lambda row: -sum(g.pending for g in row.groups),
    "lag": lambda row: -sum(g.lag or 0 for g in row.groups),
}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def select(rows: Sequence[StreamRow], *, sort: str = "name", match: str = "") -> list[StreamRow]:
    """``rows`` whose key matches ``match`` (a glob, or a substring without glob characters),
    sorted by ``sort`` (a key of :data:`SORTS`), then by name."""
    if match:
        glob = match if any(c in match for c in "*?[") else f"*{match}*"
        rows = [row for row in rows if fnmatch.fnmatchcase(row.key, glob)]
    return sorted(rows, key=lambda row: (SORTS[sort](row), row.key))


def stream_table(rows: Sequence[StreamRow]) -> Table:
    """One line per stream, then one per group (``stream/group``)."""
    header = [
        "STREAM", "LENGTH", "ADDED/S", "PENDING", "LAG", "DELIVERED/S", "ACKED/S",
        "CONSUMERS", "DELAYED", "DUE", "DEAD-LETTERS-OF",
    ]  # fmt: skip
    lines: list[list[str]] = []
    for row in rows:
        dead = "-" if row.dead_letter_of is None else (row.dead_letter_of or "?")
        blank = [""] * 5
        delayed = [str(row.delayed), str(row.delayed_due), dead]
        lines.append([row.key, str(row.length), _num(row.added_per_s), *blank, *delayed])
        for group in row.groups:
            stuck = f" ({len(group.stuck)} stuck)" if group.stuck else ""
            name = f"  {row.key}/{group.name}"
            counts = [str(group.pending), _count(group.lag)]
            rates = [_num(group.delivered_per_s), _num(group.acked_per_s)]
            lines.append([name, "", "", *counts, *rates, f"{len(group.consumers)}{stuck}"])
            lines[-1].extend(["", "", ""])
    return header, lines


def consumer_table(rows: Sequence[StreamRow]) -> Table:
    """One line per consumer of every group: pending, idle seconds, and ``stuck`` if so."""
    header = ["CONSUMER", "PENDING", "IDLE/S", "STATE"]
    lines = []
    for row in rows:
        for group in row.groups:
            for consumer in group.consumers:
                state = "stuck" if consumer.name in group.stuck else "ok"
                lines.append(
                    [
                        f"{row.key}/{group.name}/{consumer.name}",
                        str(consumer.pending),
                        f"{consumer.idle_ms / 1000:.1f}",
                        state,
                    ]
                )
    return header, lines


def file_table(rows: Sequence[FileRow]) -> Table:
    header = ["KEY", "MESSAGES", "MESSAGES/S", "SEQ"]
    lines = [
        [row.key, str(row.messages), _num(row.per_s), f"{row.first_seq}..{row.last_seq}"]
        for row in rows
    ]
    return header, lines


def group_table(groups: Sequence[GroupInfo], now_ms: int) -> Table:
    """One line per consumer group of a stream file: its position (the offset, and the first
    message not settled), lag (``N+``: counted up to the reading budget), members (alive of
    all), held messages, waiting retries and when the first is due."""
    header = [
        "GROUP", "KEYS", "POSITION", "NEXT", "LAG", "LAG-BYTES", "MEMBERS", "HELD", "DELAYED",
        "NEXT-DUE",
    ]  # fmt: skip
    lines = []
    for group in groups:
        if group.error is not None:
            continue  # see unreadable_group_table
        first = group.first_unsettled
        alive = sum(1 for member in group.members if member.alive)
        due = group.next_due_ms
        lines.append(
            [
                group.name,
                ",".join(group.keys) + (" (ordered)" if group.ordered else ""),
                str(group.position),
                "-" if first is None else f"{first[0]}:{first[1]}",
                f"{group.lag_messages}{'' if group.lag_counted else '+'}",
                str(group.lag_bytes),
                f"{alive}/{len(group.members)}",
                str(group.held),
                str(group.delayed),
                "-"
                if due is None
                else ("due" if due <= now_ms else f"{(due - now_ms) / 1000:.1f}s"),
            ]
        )
    return header, lines


def unreadable_group_table(groups: Sequence[GroupInfo]) -> Table:
    """The groups of a stream file whose state cannot be read, and why."""
    return ["GROUP", "ERROR"], [[g.name, g.error] for g in groups if g.error is not None]


def as_text(table: Table) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    header, lines = table
    widths = [len(h) for h in header]
    for line in lines:
        for n, cell in enumerate(line):
            widths[n] = max(widths[n], len(cell))
    out = []
    for line in [header, *lines]:
        cells = [
            cell.ljust(widths[n]) if n == 0 else cell.rjust(widths[n])
            for n, cell in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"
