"""``trio-streams record`` and ``trio-streams replay``: Redis to a stream file and back.

Both stop cleanly on SIGINT or SIGTERM: the recording's file is flushed, fsynced and closed
with everything written so far, and one summary line says what was done. A recording that
follows (``--follow``, a channel) is meant to be stopped that way and exits 0; a backlog cut
short exits 130, saying the last id it wrote.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Awaitable, Callable

import trio

from ..core.errors import TrioStreamsError
from ..core.groups import open_nursery
from ..core.names import listing
from ..file.positions import parse_position
from ..file.reader import FileReader
from ..file.writer import StreamWriter
from ..record.bounds import BoundError, StreamBounds, parse_bounds
from ..record.headers import ID_HEADER
from ..record.pacing import Pacing
from ..record.progress import make_progress
from ..record.recorder import (
    RecordSummary,
    check_file_key,
    pattern_file_key,
    record_channel,
    record_list,
    record_stream,
)
from ..record.replayer import MessageRefused, ReplaySummary, replay_file
from ..record.resume import KeyNotRecorded, id_after, recorded_key
from ..redis.client import RedisClient, connect, redact_url
from ..redis.wire import split_id, text
from ..top.redis_sample import scan_keys
from .args import error_line, error_notes

__all__ = ["record", "replay"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SourceNotFound(TrioStreamsError):
    """The key to record is neither a stream nor a list (the message names it)."""


async def _until_signal(work: Callable[[], Awaitable[None]]) -> str | None:
    """Run ``work``; a SIGINT or SIGTERM cancels it. The signal's name, or None if it ended."""
    stopped: list[str] = []
    with trio.open_signal_receiver(*_SIGNALS) as signals:
        async with open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    stopped.append(signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            await work()
            nursery.cancel_scope.cancel()
    return stopped[0] if stopped else None


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:.0f}/s" if seconds > 0 else "-"


def _record_line(
    summary: RecordSummary, path: str, seconds: float, stopped: str | None, resumed: str = ""
) -> str:
    parts = [f"recorded {summary.entries} entries of {summary.source} into {path}{resumed}"]
    if summary.entries:
        parts.append(f" (key {summary.key!r}, seq {summary.first_seq}..{summary.last_seq}")
        if summary.first_id is not None:
            parts.append(f", ids {summary.first_id}..{summary.last_id}")
        parts.append(")")
    parts.append(f" in {seconds:.2f} s, {_rate(summary.entries, seconds)}")
    if summary.gaps:
        parts.append(f"; {summary.gaps} gap(s) while reconnecting")
    if stopped is not None:
        if summary.backlog_done:
            parts.append(f"; stopped by {stopped}")
        else:
            last = f" after id {summary.last_id}" if summary.last_id else ""
            parts.append(f"; backlog cut short by {stopped}{last}")
    elif summary.limit_reached:
        parts.append("; --limit reached")
    return "".join(parts)


async def _source_kind(client: RedisClient, args: argparse.Namespace) -> str:
    if args.channel or args.pattern:
        return "pattern" if args.pattern else "channel"
    kind = text(await client.execute("TYPE", args.source))
    if kind in ("stream", "list"):
        return kind
    if kind == "none" and args.follow:
        return "stream"  # not there yet: followed from its first entry once it is
    what = "nothing" if kind == "none" else f"a {kind}"
    raise SourceNotFound(
        f"{args.source!r} at {redact_url(args.url)} is {what}, not a stream or a list "
        f"(to record a Pub/Sub channel, add --channel){await _keys_there(client, args.source)}"
    )


async def _keys_there(client: RedisClient, source: str) -> str:
    """``; streams and lists there: ...``, the closest to ``source`` first (a typo's fix)."""
    found: list[str] = []
    for kind in ("stream", "list"):
        found += (await scan_keys(client, "*", kind))[0]
    if not found:
        return "; there is no stream or list there"
    return f"; streams and lists there: {listing(source, found)}"


async def _record_main(args: argparse.Namespace) -> int:
    bounds = parse_bounds(args.start, args.until)
    if bounds.from_end and not args.follow:
        raise BoundError("--from end records only entries added from now on: add --follow")
    err = sys.stderr

    def fault(line: str) -> None:
        err.write(f"warning: {line}\n")
        err.flush()

    async with connect(args.url) as client:
        kind = await _source_kind(client, args)
        if kind == "list" and (args.follow or args.start or args.until):
            raise SourceNotFound(
                f"{args.source!r} is a list: it is recorded as one snapshot (LRANGE), without "
                "--from, --until or --follow (following a list would take its elements)"
            )
        if kind in ("channel", "pattern") and (args.start or args.until):
            raise BoundError("a channel has no past: --from and --until are for streams")
        default_key = pattern_file_key(args.source) if kind == "pattern" else args.source
        key = check_file_key(args.key or default_key, f"the {kind} {args.source!r}")
        resumed = ""
        if kind == "stream":
            bounds, resumed = _resumed(bounds, args, key)
        summary = RecordSummary(f"{kind} {args.source!r}", key)
        # Pages are flushed from the event loop: only the close syncs, in a worker thread.
        writer = StreamWriter(args.to, durability="close")
        progress = make_progress(args.progress)
        on_page = progress if progress is not None else (lambda s: None)
        began = trio.current_time()
        try:

            async def work() -> None:
                if kind == "stream":
                    await record_stream(
                        client, args.source, writer, key=key, bounds=bounds,
                        follow=args.follow, limit=args.limit,
                        id_header=args.id_header or None, on_page=on_page, on_fault=fault,
                        summary=summary,
                    )  # fmt: skip
                elif kind == "list":
                    await record_list(
                        client, args.source, writer, key=key, limit=args.limit,
                        on_page=on_page, summary=summary,
                    )  # fmt: skip
                else:
                    await record_channel(
                        client, args.source, writer, pattern=kind == "pattern", key=key,
                        limit=args.limit, on_page=on_page, on_fault=fault, summary=summary,
                    )  # fmt: skip

            stopped = await _until_signal(work)
        finally:
            if progress is not None:
                progress.close()
            await writer.aclose()  # flushed and fsynced, whatever stopped the recording
    seconds = trio.current_time() - began
    sys.stdout.write(_record_line(summary, args.to, seconds, stopped, resumed) + "\n")
    return 130 if stopped is not None and not summary.backlog_done else 0


def _resumed(bounds: StreamBounds, args: argparse.Namespace, key: str) -> tuple[StreamBounds, str]:
    """The bounds of a recording into ``key`` of ``args.to``, and what the summary says of it.

    Entries already recorded there are not recorded again: without ``--from`` the recording
    resumes after the last one; an explicit ``--from`` at or before it skips them. A key holding
    messages that were not recorded is refused unless ``--append``."""
    held = recorded_key(args.to, key, args.id_header or ID_HEADER)
    if held.not_recorded and not args.append:
        raise KeyNotRecorded(
            f"key {key!r} of {args.to} holds {held.not_recorded} message(s) that were not "
            f"recorded from Redis (no {args.id_header or ID_HEADER} header)"
        )
    last = held.last_id
    if last is None or bounds.start is None:  # nothing recorded yet, or --from end
        return bounds, ""
    after = id_after(last)
    if args.start is None:
        return StreamBounds(after, bounds.end), f" (resumed after {last})"
    if bounds.start == "-" or split_id(bounds.start) < split_id(after):
        return (
            StreamBounds(after, bounds.end),
            f" (ids up to {last}, already in the file, skipped)",
        )
    return bounds, ""


def _pacing(args: argparse.Namespace) -> Pacing:
    if args.rate is not None:
        return Pacing.per_second(args.rate)
    if args.speed is not None:
        return Pacing.as_recorded(args.speed)
    if args.as_recorded:
        return Pacing.as_recorded()
    return Pacing.unpaced()


async def _replay_main(args: argparse.Namespace) -> int:
    pacing = _pacing(args)
    start = parse_position(args.start) if args.start else None
    summary = ReplaySummary()
    with FileReader(args.file):
        pass  # a missing or foreign file is said before the server is asked anything
    async with connect(args.to) as client:
        # A login refused is the deployment's error, said before any message is read.
        await client.execute("PING")
        began = trio.current_time()

        async def work() -> None:
            await replay_file(
                args.file, client, keys=args.key, rename=args.stream, target=args.as_,
                start=start, pacing=pacing, keep=args.keep_header, id_header=args.id_header,
                limit=args.limit, retries=args.keep_retries, summary=summary,
            )  # fmt: skip

        try:
            stopped = await _until_signal(work)
        except MessageRefused:
            # The summary says what went out before the refused message, then the error.
            _replay_line(summary, args, pacing, trio.current_time() - began, "a refused message")
            raise
    _replay_line(summary, args, pacing, trio.current_time() - began, stopped)
    return 130 if stopped is not None else 0


def _replay_line(
    summary: ReplaySummary,
    args: argparse.Namespace,
    pacing: Pacing,
    seconds: float,
    stopped: str | None,
) -> None:
    counts = dict(summary.per_key)
    if summary.refused_key is not None:
        counts.setdefault(summary.refused_key, 0)
    groups = []
    for kind in ("stream", "list", "channel"):
        these = [f"{k!r}: {n}" for k, n in sorted(counts.items()) if summary.kinds[k] == kind]
        if these:
            groups.append(f"{kind} {', '.join(these)}")
    keys = ", ".join(groups)
    if not keys:  # nothing went anywhere: the keys it was to go to
        named = [args.stream] if args.stream else sorted(set(args.key or ()))
        keys = ", ".join(map(repr, named)) if named else "the file's keys"
        keys = f"{args.as_} {keys}" if args.as_ else keys
    line = (
        f"replayed {summary.published} messages of {args.file} to {keys} "
        f"({pacing.describe()}) in {seconds:.2f} s, "
        f"{_rate(summary.published, seconds)}"
    )
    if summary.retries_left_out:
        line += (
            f"; {summary.retries_left_out} retry copies left out (copies of messages in the "
            "recording; --keep-retries sends them)"
        )
    if stopped is not None:
        line += f"; stopped by {stopped}"
    sys.stdout.write(line + "\n")


def _guarded(main: Callable[[argparse.Namespace], Awaitable[int]]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(trio.run(main, args))
        except TrioStreamsError as exc:
            sys.stdout.flush()
            sys.stderr.write(error_line(str(exc)) + "\n")
            for note in error_notes(exc):
                sys.stderr.write(f"  {note}\n")
            # Bounds that contradict each other are a bad command line; the rest is the
            # server's or the file's answer.
            return 2 if isinstance(exc, BoundError) else 1

    return run


#: ``trio-streams record``: copy a Redis stream, list or channel into a stream file.
record = _guarded(_record_main)
#: ``trio-streams replay``: publish a recording back to Redis.
replay = _guarded(_replay_main)
