"""``trio-streams file decode|tail|stat|write|repair|group``: look into, make and mend stream
files, and the consumer groups kept beside them.

``decode --format ndjson`` prints, and ``write`` reads, first the file's header as
``{"file_header": {"file_name", "created_at_ms", "beacon_interval"}}``, then one message a line
as ``{"stream_key", "shard", "seq", "timestamp_ms", "payload", "encoding"}`` with ``encoding``
``utf8`` (the payload is the text) or ``base64``. Every message is printed, internal ones and the
end-of-stream message decoding stops at included, so the two round-trip byte for byte.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import trio

from ..core.group_moves import GroupMove, PositionRefused
from ..core.positions import Position, PositionKind
from ..file.envelope import open_envelope
from ..file.errors import StreamFileError, StreamFileNotFoundError
from ..file.follower import FileSource
from ..file.format import (
    DEFAULT_BEACON_INTERVAL,
    HEADER_SIZE,
    INTERNAL_KEY,
    Header,
    Message,
    encode_header,
)
from ..file.groups import GroupInfo, delete_group, list_groups, move_group, reset_group
from ..file.keys import check_file_keys
from ..file.lock import EXCLUSIVE_WAIT, hold_exclusively
from ..file.ndjson_input import InputError, check_against, read_input
from ..file.positions import format_position, parse_position
from ..file.reader import FileReader
from ..file.repair import RepairPlan, apply_repair, plan_repair
from ..file.writer import StreamWriter
from .args import (
    bad_command_line,
    beacon_interval,
    error_line,
    file_group,
    file_position,
    guarded,
    seconds,
    stream_key,
)

#: Files at least this large show a progress bar on ``stat`` (when stderr is a terminal).
_PROGRESS_FROM_BYTES = 32 << 20


def message_to_json(message: Message) -> dict[str, Any]:
    """The ndjson object of one message (UTF-8 payloads as text, anything else as base64)."""
    try:
        payload, encoding = message.payload.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(message.payload).decode("ascii"), "base64"
    return {
        "stream_key": message.stream_key,
        "shard": message.shard,
        "seq": message.seq,
        "timestamp_ms": message.timestamp_ms,
        "payload": payload,
        "encoding": encoding,
    }


def header_to_json(header: Header) -> dict[str, Any]:
    """The first ndjson line of ``decode``: what ``write`` needs to recreate the header."""
    return {
        "file_header": {
            "file_name": header.file_name,
            "created_at_ms": header.created_at_ms,
            "beacon_interval": header.beacon_interval,
        }
    }


def format_log(message: Message) -> str:
    """A human-readable line: time, stream, seq, shard, offset, headers, then the payload.

    Header envelopes (``rs1:``/``rs2:``) are opened, so the payload shows as a handler sees it;
    ``--format ndjson`` keeps the frame bytes as stored, so ``write`` reproduces the file.
    """
    when = datetime.fromtimestamp(message.timestamp_ms / 1000, UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{message.timestamp_ms % 1000:03d}Z"
    payload, headers = open_envelope(message.payload)
    try:
        shown = payload.decode("utf-8")
    except UnicodeDecodeError:
        shown = "base64:" + base64.b64encode(payload).decode("ascii")
    labels = "".join(f" {name}={value!r}" for name, value in headers.items())
    return (
        f"{stamp} {message.stream_key} #{message.seq} shard={message.shard} "
        f"@{message.offset}{labels} {shown}"
    )


def _printer(fmt: str, out: TextIO) -> Any:
    if fmt == "ndjson":
        return lambda m: out.write(json.dumps(message_to_json(m)) + "\n")
    return lambda m: out.write(format_log(m) + "\n")


def _one_key(keys: list[str] | None, position: Position) -> str | None:
    if position.kind in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
        if not keys or len(keys) != 1:
            bad_command_line(f"--from {format_position(position)} needs exactly one --key")
        return keys[0]
    return None


def _decode(args: argparse.Namespace) -> int:
    position = parse_position(args.start)
    key = _one_key(args.key, position)
    emit = _printer(args.format, sys.stdout)
    # Internal messages are printed unless other keys were asked for; the end-of-stream message
    # decoding stops at always is (the last line), so `decode | write` gives the file back.
    internal = args.key is None or INTERNAL_KEY in args.key
    check_file_keys(args.file, args.key)
    with FileReader(args.file, keys=args.key, internal=internal) as reader:
        if args.format == "ndjson" and args.header:
            sys.stdout.write(json.dumps(header_to_json(reader.header)) + "\n")
        if position != Position.beginning():
            reader.seek(position, key=key)
        for message in reader:
            emit(message)
        if reader.eos is not None:
            emit(reader.eos)
    return 0


async def _follow(args: argparse.Namespace) -> None:
    position = parse_position(args.start)
    key = _one_key(args.key, position)
    emit = _printer(args.format, sys.stdout)
    async with await FileSource.open(args.file, mode="live", keys=args.key) as source:
        if position != Position.end():
            await source.seek(position, key=key)
        while True:
            batch = source.read_available(1024)
            for message in batch:
                emit(message)
            if batch:
                sys.stdout.flush()
            else:
                await source.wait()


def _tail(args: argparse.Namespace) -> int:
    try:
        trio.run(_follow, args)
    except KeyboardInterrupt:
        return 130
    return 0


@dataclass
class _StreamStats:
    count: int = 0
    first_seq: int = 0
    last_seq: int = 0
    first_ts: int = 0
    last_ts: int = 0
    bytes: int = 0


def _stat(args: argparse.Namespace) -> int:
    out = sys.stdout
    with FileReader(args.file, internal=True, on_eos="include") as reader:
        header = reader.header
        size = reader.file_size()
        show_progress = args.progress or (size >= _PROGRESS_FROM_BYTES and sys.stderr.isatty())
        streams: dict[tuple[str, int], _StreamStats] = {}
        beacons = 0
        last_beacon = None
        eos_count = 0
        shown = -1
        while True:
            batch = reader.read_messages(8192)
            for m in batch:
                if m.is_eos:
                    eos_count += 1
                    continue
                stats = streams.get((m.stream_key, m.shard))
                if stats is None:
                    stats = streams[(m.stream_key, m.shard)] = _StreamStats(
                        first_seq=m.seq, first_ts=m.timestamp_ms
                    )
                stats.count += 1
                stats.last_seq = max(stats.last_seq, m.seq)
                stats.first_seq = min(stats.first_seq, m.seq)
                stats.first_ts = min(stats.first_ts, m.timestamp_ms)
                stats.last_ts = max(stats.last_ts, m.timestamp_ms)
                stats.bytes += len(m.payload)
            if reader.decoder.last_beacon is not last_beacon:
                last_beacon = reader.decoder.last_beacon
            if show_progress:
                percent = reader.offset * 100 // max(size, 1)
                if percent != shown:
                    shown = percent
                    bar = "#" * (percent // 4)
                    sys.stderr.write(f"\rscanning [{bar:<25}] {percent:3d}%")
                    sys.stderr.flush()
            if not batch and reader.at_eof:
                break
        if show_progress:
            sys.stderr.write("\n")
        reader.check_finished()
        beacons = max(0, size - 1) // header.beacon_interval if size > HEADER_SIZE else 0
        out.write(f"file:             {reader.path}\n")
        out.write(f"header name:      {header.file_name}\n")
        out.write(f"created at:       {header.created_at_ms} ms\n")
        out.write(f"beacon interval:  {header.beacon_interval} bytes\n")
        out.write(f"size:             {size} bytes\n")
        out.write(f"beacons:          {beacons}\n")
        out.write(f"end of stream:    {'yes' if eos_count else 'no'}\n")
        out.write(f"messages:         {sum(s.count for s in streams.values())}\n")
        for (key, shard), s in sorted(streams.items()):
            out.write(
                f"  {key} shard {shard}: {s.count} messages, seq {s.first_seq}..{s.last_seq}, "
                f"ts {s.first_ts}..{s.last_ts} ms, {s.bytes} payload bytes\n"
            )
    _print_groups(list_groups(args.file), out)
    return 0


def _print_groups(groups: list[GroupInfo], out: TextIO) -> None:
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


def _set_group_position(args: argparse.Namespace) -> int:
    position = _group_target(args, args.position)
    assert position is not None
    try:
        move = move_group(args.file, args.group, position, dry_run=args.dry_run)
    except PositionRefused as exc:
        _note_key(exc, args, position)
        raise
    sys.stdout.write(_move_line(move) + "\n")
    return 0


def _reset_group(args: argparse.Namespace) -> int:
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


def _delete_group(args: argparse.Namespace) -> int:
    delete_group(args.file, args.group)
    sys.stdout.write(f"deleted group {args.group!r} of {args.file}\n")
    return 0


def _write(args: argparse.Namespace) -> int:
    # The whole input is read and checked before the file is touched: all or nothing.
    try:
        given = read_input(sys.stdin, beacon_interval=args.beacon_interval)
    except InputError as exc:
        raise SystemExit(error_line(str(exc))) from None
    header = given.header
    # Options win over the header line, which wins over the defaults; all only matter when the
    # file is created (an existing file keeps its header).
    interval: int | None = args.beacon_interval
    created_at_ms: int | None = args.created_at_ms
    file_name: str | None = args.file_name
    if header is not None:
        interval = header.beacon_interval if interval is None else interval
        created_at_ms = header.created_at_ms if created_at_ms is None else created_at_ms
        file_name = header.file_name if file_name is None else file_name
    interval = DEFAULT_BEACON_INTERVAL if interval is None else interval
    try:  # what the options give the header of a new file
        encode_header(
            Header(file_name or os.path.basename(args.file), created_at_ms or 0, interval)
        )
    except StreamFileError as exc:
        raise SystemExit(error_line(exc.reason)) from None
    # The given sequence numbers are checked against the file's, then written: no other
    # writer may append in between.
    existed = os.path.lexists(args.file)
    writer = StreamWriter(
        args.file,
        beacon_interval=interval,
        created_at_ms=created_at_ms,
        file_name=file_name,
        exclusive=True,
    )
    try:
        check_against(given.rows, writer.last_sequences(), writer.path)
    except InputError as exc:
        writer.close()
        if not existed:  # created just now: leave no file behind, as other refusals do
            os.unlink(args.file)
        raise SystemExit(error_line(f"{exc}; nothing was written")) from None
    try:
        for row in given.rows:
            writer.write_message(row.stream_key, row.shard, row.seq, row.timestamp_ms, row.payload)
    finally:
        writer.close(eos=args.eos, eos_timestamp_ms=args.eos_timestamp_ms)
    return 0


def _describe(plan: RepairPlan, out: TextIO) -> None:
    if plan.size == 0:
        out.write(
            f"{plan.path}: empty (0 bytes), as a writer killed before its header leaves it; "
            "nothing to repair: the next writer writes the header\n"
        )
        return
    if plan.offset is None:
        out.write(
            f"{plan.path}: all {plan.size} bytes decode ({plan.messages} messages); "
            "nothing to repair\n"
        )
        return
    out.write(
        f"{plan.path}: {plan.size} bytes; everything before byte {plan.offset} decodes "
        f"({plan.messages} messages)\n"
        f"from byte {plan.offset}: {plan.reason}\n"
        f"repair moves the {plan.tail_bytes} bytes from byte {plan.offset} to the end into "
        f"{plan.side_file} (a new file), then truncates {plan.path} to {plan.offset} bytes; "
        f"{plan.messages} messages stay\n"
    )


def _confirmed(out: TextIO) -> bool:
    out.write("move them? [y/N] ")
    out.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if sys.stdin is None or not sys.stdin.isatty():
        out.write("\n")  # the answer was not echoed
    return answer.strip().lower() in ("y", "yes")


def _repair(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.dry_run:
        plan = plan_repair(args.file)
        _describe(plan, out)
        if plan.offset is not None:
            out.write("dry run: nothing changed\n")
        return 0
    try:
        fd = os.open(args.file, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise StreamFileNotFoundError(f"cannot open: {exc.strerror}", path=args.file) from exc
    try:
        plan = plan_repair(args.file, fd)
        _describe(plan, out)
        if plan.offset is None:
            return 0
        if not args.yes and not _confirmed(out):
            out.write("refused: nothing changed\n")
            return 1
        # No writer may append while the tail is moved; the file must be as it was planned.
        lock = hold_exclusively(fd, args.file, timeout=args.wait)
        try:
            if plan_repair(args.file, fd) != plan:
                raise StreamFileError(
                    "the file changed since it was scanned; nothing was changed, run repair again",
                    path=args.file,
                )
            side = apply_repair(plan, fd)
        finally:
            os.close(lock)
    finally:
        os.close(fd)
    out.write(
        f"moved {plan.tail_bytes} bytes to {side}; {plan.path} now ends at byte {plan.offset}\n"
    )
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``file`` and its subcommands to the ``trio-streams`` parser."""
    parser = commands.add_parser("file", help="inspect and write SeaStreamer stream files (.ss)")
    sub = parser.add_subparsers(dest="file_command", metavar="SUBCOMMAND", required=True)

    def reading(name: str, help_text: str, default_from: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("file", help="the stream file (.ss)")
        p.add_argument(
            "--format",
            choices=("log", "ndjson"),
            default="log",
            help="log: one readable line a message, headers opened (default); ndjson: the "
            "frames as stored, one JSON object a line, the input format of `write`",
        )
        p.add_argument("--key", action="append", help="only this stream key (repeatable)")
        if name == "decode":
            p.add_argument(
                "--no-header",
                dest="header",
                action="store_false",
                help="ndjson: leave out the first line, the file header",
            )
        p.add_argument(
            "--from",
            dest="start",
            type=file_position,
            default=default_from,
            metavar="POS",
            help=f"beginning, end, seq:N or ts:MS (default {default_from})",
        )
        return p

    reading("decode", "print the messages of a file", "beginning").set_defaults(
        handler=guarded(_decode)
    )
    reading("tail", "follow a file live, printing new messages", "end").set_defaults(
        handler=guarded(_tail)
    )
    stat = sub.add_parser("stat", help="header, streams, counts, sequence ranges, beacons")
    stat.add_argument("file", help="the stream file (.ss)")
    stat.add_argument("--progress", action="store_true", help="always show the progress bar")
    stat.set_defaults(handler=guarded(_stat))
    write = sub.add_parser(
        "write",
        help="write ndjson messages from stdin into a file",
        description="Write the messages of an ndjson input (the output of `decode --format "
        "ndjson`) into FILE, created if missing. The whole input is read into memory and "
        "checked first (every line, and that each stream's sequence numbers increase, also "
        "after the file's own), so a bad line leaves the file as it was: all or nothing. A huge "
        "input needs as much memory as its payloads take.",
    )
    write.add_argument("file", help="the stream file to create or append to")
    write.add_argument(
        "--beacon-interval",
        type=beacon_interval,
        default=None,
        help="bytes between beacons for a new file (default: the file_header line's, else "
        f"{DEFAULT_BEACON_INTERVAL})",
    )
    write.add_argument(
        "--created-at-ms",
        type=int,
        default=None,
        help="the header's creation time (default: the file_header line's, else now)",
    )
    write.add_argument(
        "--file-name",
        default=None,
        help="the header's file name (default: the file_header line's, else the file's name)",
    )
    write.add_argument("--eos", action="store_true", help="end with an end-of-stream message")
    write.add_argument(
        "--eos-timestamp-ms",
        type=int,
        default=None,
        help="the end-of-stream message's timestamp (default: now)",
    )
    write.set_defaults(handler=guarded(_write))
    repair = sub.add_parser(
        "repair",
        help="move the part of a file that does not decode into a side file, then truncate",
    )
    repair.add_argument("file", help="the stream file (.ss)")
    repair.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    repair.add_argument("--dry-run", action="store_true", help="only say what would be done")
    repair.add_argument(
        "--wait",
        type=seconds(),
        default=EXCLUSIVE_WAIT,
        metavar="SECONDS",
        help="how long to wait for writers' appends to let repair have the file to itself "
        f"(default {EXCLUSIVE_WAIT:g})",
    )
    repair.set_defaults(handler=guarded(_repair))
    _register_group(sub)


def _register_group(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``file group reset|delete|set-position``."""
    parser = sub.add_parser(
        "group",
        help="manage the consumer groups of a stream file (set-position, reset, delete)",
        description="Manage the consumer groups kept beside a stream file (FILE.groups/). "
        "Each command holds the group's lock while it works, and is refused while a member "
        "of the group runs; `trio-streams file stat FILE` shows the groups.",
    )
    actions = parser.add_subparsers(dest="group_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text, description=description)
        p.add_argument("file", help="the stream file (.ss)")
        p.add_argument("group", metavar="GROUP", type=file_group, help="the consumer group")
        return p

    def key_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--key",
            type=stream_key,
            help="the stream a seq:N or ts:MS position is of (needed when the group reads several)",
        )

    move = action(
        "set-position",
        "move a group for all its members, or --dry-run to see what it would skip",
        "Set the group's position for all its members: it handles what follows POSITION, in "
        "file order. What members took and did not settle, and the retries that wait, stay as "
        "they are. Refused while a member is live (its process runs and its lease has not run "
        "out).",
    )
    move.add_argument(
        "position",
        metavar="POSITION",
        type=file_position,
        help="beginning, end (the end of the file now), seq:N (the first message of the "
        "stream with seq N or more) or ts:MS (the first message strictly later)",
    )
    key_option(move)
    move.add_argument(
        "--dry-run",
        action="store_true",
        help="say what the move would skip or replay, and move nothing",
    )
    move.set_defaults(handler=guarded(_set_group_position))
    reset = action(
        "reset",
        "move a group and forget what it held, its waiting retries and its gone members",
        "Move the group (to --to POS, or where it stands: its first unsettled message) and "
        "forget the messages its members took and did not settle (from its position on they "
        "are delivered again), its waiting retries, and its members, which must all be gone: "
        "refused while a member process runs.",
    )
    reset.add_argument(
        "--to",
        type=file_position,
        default=None,
        metavar="POS",
        help="beginning, end, seq:N or ts:MS (default: where the group stands)",
    )
    key_option(reset)
    reset.set_defaults(handler=guarded(_reset_group))
    delete = action(
        "delete",
        "remove a group's state: its next member starts it anew",
        "Remove the group's directory beside the file (its state, lock, bell, its members' "
        "locks and run journals; nothing else). Refused while a member process runs. Its state "
        "need not be readable.",
    )
    delete.set_defaults(handler=guarded(_delete_group))
