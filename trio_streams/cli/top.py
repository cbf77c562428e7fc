"""``trio-streams top TARGET``: a live view of a Redis deployment's streams, of a stream file,
or of a running app's subscriptions.

``TARGET`` is a Redis URL (``redis://``, ``rediss://``, ``redis+cluster://``,
``redis+sentinel://``), the path of a stream file, or the ``http://HOST:PORT`` of an app run
with ``--http`` (its ``/metrics`` and ``/readyz``). ``--once`` takes two snapshots
``--interval`` apart and prints the second as text (rates are over the time between them),
for scripts and tests; without it, the live view needs a terminal and the ``tui`` extra (rich).
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from collections.abc import Sequence

import trio

from ..core.errors import ConfigurationError, TrioStreamsError
from ..core.extras import require
from ..core.groups import open_nursery
from ..core.names import check_names
from ..file.errors import StreamFileNotFoundError
from ..file.keys import check_file_keys
from ..redis.client import RedisClient, connect, redact_url
from ..redis.wire import text
from ..top.file_sample import FileSampler
from ..top.live import LIVE_VIEW
from ..top.redis_sample import scan_streams
from ..top.render import as_text
from ..top.view import FileWatch, RedisWatch, Screen, Watch
from .args import REDIS_SCHEMES, error_line, error_notes

__all__ = ["screen_text", "show"]

#: ``HOST:PORT`` (``[::1]:PORT`` too): a Redis address given without its ``redis://``.
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):\d{1,5}")


def screen_text(screen: Screen) -> str:
    """A screen as plain text: the title, then each table under its name."""
    parts = [screen.title + "\n"]
    for title, table in screen.tables:
        parts.append(f"\n{title}:\n")
        parts.append(as_text(table))
    return "".join(parts)


async def _show(watch: Watch, args: argparse.Namespace) -> None:
    if args.once:
        await watch.refresh()
        await trio.sleep(args.interval)
        await watch.refresh()
        sys.stdout.write(screen_text(watch.screen(sort=args.sort, match=args.filter)))
        return
    from ..top.live import run_live

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_nursery() as nursery:

            async def stop() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(stop)
            await run_live(watch, interval=args.interval, sort=args.sort, match=args.filter)
            nursery.cancel_scope.cancel()


async def _top(args: argparse.Namespace) -> int:
    if not args.once:
        require("tui", LIVE_VIEW)
        if not sys.stdout.isatty():
            raise ConfigurationError("the live view needs a terminal; use --once for text")
    if args.target.startswith("http://"):
        from ..top.app_watch import APP_METRICS, AppWatch

        require("prometheus", APP_METRICS)  # refused before the first request

        await _show(AppWatch(args.target), args)
        return 0
    if args.target.startswith(REDIS_SCHEMES):
        shown = redact_url(args.target)  # the title and errors never show the password
        async with connect(args.target) as client:
            await _check_streams(client, args.stream, shown)
            watch: Watch = RedisWatch(
                client,
                shown,
                streams=args.stream,
                scan_match=args.match,
                dead_letter_globs=args.dead_letter,
                stuck_after=args.stuck_after,
            )
            await _show(watch, args)
        return 0
    if _HOST_PORT.fullmatch(args.target) and not await trio.Path(args.target).exists():
        raise StreamFileNotFoundError(
            "no such stream file (a Redis URL starts with redis://)",
            path=args.target,
        )
    with FileSampler(args.target) as sampler:
        check_file_keys(args.target, args.stream)
        await _show(FileWatch(sampler, keys=args.stream), args)
    return 0


async def _check_streams(client: RedisClient, streams: Sequence[str], url: str) -> None:
    """Refuse a ``--stream`` that is not a stream on the server (a typo would show an empty
    table), listing the streams that are there, closest first."""
    there: set[str] = set()
    for key in dict.fromkeys(streams):
        if text(await client.execute("TYPE", key)) == "stream":
            there.add(key)
    if len(there) < len(set(streams)):
        found, _ = await scan_streams(client)
        check_names("stream", streams, there | set(found), url)


def show(args: argparse.Namespace) -> int:
    """Watch the target the command line names: one snapshot with ``--once``, else the live
    view until it is quit; the exit status."""
    try:
        return int(trio.run(_top, args))
    except TrioStreamsError as exc:
        sys.stderr.write(error_line(str(exc)) + "\n")
        for note in error_notes(exc):
            sys.stderr.write(f"  {note}\n")
        return 1
