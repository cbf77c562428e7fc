"""``trio-streams file group set-position|reset|delete FILE GROUP``: manage the consumer groups
kept beside a stream file, and how ``file stat`` shows them."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from ..core.group_moves import GroupMove, PositionRefused
from ..core.positions import Position, PositionKind
from ..file.groups import GroupInfo, delete_group, move_group, reset_group
from ..file.positions import parse_position
from .args import bad_command_line

__all__ = ["delete", "print_groups", "reset", "set_position"]


def print_groups(groups: list[GroupInfo], out: TextIO) -> None:
    """The ``groups`` section of ``stat``: each group's keys, position, lag, what it holds and
    waits to retry, and its members."""
    out.write(f"groups:           {len(groups) or 'none'}\n")
    now_ms = int(time.time() * 1000)
    for group in groups:
        if group.error is not None:
            out.write(f"  {group.name}: error: {group.error}\n")
            continue
        order = "ordered" if group.ordered else "unordered"
        out.write(f"  {group.name}: {', '.join(group.keys)} ({order})\n")
        first = group.first_unsettled
        at = "nothing unsettled" if first is None else f"next unsettled {first[0]}:{first[1]}"
        out.write(f"    position:     byte {group.position}, {at}\n")
        lag = f"{_plural(group.lag_messages, 'message')}, {_plural(group.lag_bytes, 'byte')}"
        out.write(f"    lag:          {lag}\n")
        out.write(f"    held:         {_plural(group.held, 'message')}\n")
        due = "" if group.next_due_ms is None else f", next due {_when(group.next_due_ms, now_ms)}"
        out.write(f"    delayed:      {_plural(group.delayed, 'retry', 'retries')}{due}\n")
        out.write(f"    members:      {len(group.members)}\n")
        for member in group.members:
            state = "alive" if member.alive else "dead"
            lease = _when(member.lease_until_ms, now_ms, past="ran out")
            out.write(
                f"      {member.id}: pid {member.pid} on {member.host}, {state}, holds "
                f"{member.held}, lease until {lease}\n"
            )


def _plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


def _when(ms: int, now_ms: int, *, past: str = "due") -> str:
    """``1700000000000 ms (in 2.5 s)``: an instant, and how far it is from now."""
    seconds = (ms - now_ms) / 1000
    return f"{ms} ms ({f'in {seconds:.1f} s' if seconds > 0 else past})"


def _group_target(args: argparse.Namespace, text: str | None) -> Position | None:
    """The position ``text`` names, bound to ``--key`` (which only a sequence number or an
    instant takes)."""
    if text is None:
        if args.key is not None:
            bad_command_line("--key goes with --to seq:N or ts:MS")
        return None
    position = parse_position(text)
    if args.key is None:
        return position
    if position.kind not in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
        bad_command_line(f"--key goes with seq:N or ts:MS, not {text}")
    return position.for_stream(args.key)


def _note_key(exc: PositionRefused, args: argparse.Namespace, position: Position | None) -> None:
    """Say how the command line names a position's stream, where a refusal may be for want
    of one."""
    named = position is not None and position.kind in (
        PositionKind.SEQUENCE,
        PositionKind.TIMESTAMP,
    )
    if named and args.key is None:
        exc.add_note("--key KEY names the stream of a seq:N or ts:MS position")


def _move_line(move: GroupMove) -> str:
    """One line: ``group 'g' of f.ss: orders:3 -> byte 512, skipped 7 messages (orders:3 ..
    orders:9)`` (``would skip`` in a dry run)."""
    count = move.replayed or move.skipped
    noun = "message" if count == 1 else "messages"
    if move.replayed:
        what = f"{'delivers' if move.moved else 'would deliver'} {count} {noun} again"
    else:
        what = f"{'skipped' if move.moved else 'would skip'} {count} {noun}"
    span = "" if move.first is None else f" ({move.first} .. {move.last})"
    line = f"group {move.group!r} of {move.stream}: {move.was} -> {move.now}, {what}{span}"
    if move.pending:
        line += f"; {move.pending} held stay held"
    return line if move.moved else line + " (dry run: nothing moved)"


def set_position(args: argparse.Namespace) -> int:
    position = _group_target(args, args.position)
    assert position is not None
    try:
        move = move_group(args.file, args.group, position, dry_run=args.dry_run)
    except PositionRefused as exc:
        _note_key(exc, args, position)
        raise
    sys.stdout.write(_move_line(move) + "\n")
    return 0


def reset(args: argparse.Namespace) -> int:
    position = _group_target(args, args.to)
    try:
        reset = reset_group(args.file, args.group, position)
    except PositionRefused as exc:
        _note_key(exc, args, position)
        raise
    move = reset.move
    gone = "" if not reset.members else f" ({', '.join(reset.members)})"
    held = _plural(reset.held, "held message")
    delayed = _plural(reset.delayed, "delayed retry", "delayed retries")
    members = _plural(len(reset.members), "gone member")
    sys.stdout.write(
        f"group {move.group!r} of {move.stream} reset: {move.was} -> {move.now}; forgot "
        f"{held}, {delayed} and {members}{gone}\n"
    )
    return 0


def delete(args: argparse.Namespace) -> int:
    delete_group(args.file, args.group)
    sys.stdout.write(f"deleted group {args.group!r} of {args.file}\n")
    return 0
