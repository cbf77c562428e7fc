"""Apps ``trio-streams run`` runs in the CLI tests. ``STREAM_FILE`` names their stream file;
``FAILS`` is how many times ``flaky``'s handler fails before it succeeds."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.file import FileBroker, FileStream
from trio_streams.transport import Transport

PATH = os.environ.get("STREAM_FILE", "unused.ss")
FAILS = int(os.environ.get("FAILS", "2"))

# A file that must exist and does not.
missing = App("missing")
_missing = missing.broker(FileBroker(PATH, existing_only=True))


@_missing.subscriber(FileStream("orders").replay())
async def read_missing(n: int) -> None: ...


# A startup hook that fails.
hooky = App("hooky")
hooky.broker(MemoryBroker())


@hooky.on_startup
async def connect_database() -> None:
    raise RuntimeError("database unreachable")


# Publishes at startup: a second writer while another process writes the file.
publisher = App("publisher")
_publishing = publisher.broker(FileBroker(PATH))


@publisher.after_startup
async def announce() -> None:
    await _publishing.publish("orders", 1)


# A durable consumer: a second instance finds its lock held.
durable = App("durable")
_durable = durable.broker(FileBroker(PATH))


@_durable.subscriber(FileStream("orders", durable="billing"))
async def bill(n: int) -> None: ...


# Replays the file to its end (a damaged file stops it).
replay = App("replay")
_replayed = replay.broker(FileBroker(PATH))


@_replayed.subscriber(FileStream("orders").replay(), name="read")
async def read(n: int) -> None: ...


# A handler that fails FAILS times, then succeeds.
flaky = App("flaky")
_flaky = flaky.broker(FileBroker(PATH))
calls: list[int] = []


@_flaky.subscriber(FileStream("orders").replay(), max_attempts=5, dead_letter="orders.dead")
async def charge(n: int) -> None:
    calls.append(n)
    if len(calls) <= FAILS:
        raise ValueError(f"payment gateway timed out (call {len(calls)})")


class TwoServersDown(MemoryBroker):
    """Connects to two servers at once; both refuse."""

    refusing = True

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        if self.refusing:
            raise ExceptionGroup(
                "connecting",
                [
                    ConnectionRefusedError("server a refused"),
                    ConnectionRefusedError("server b refused"),
                ],
            )
        async with super().connect() as transport:
            yield transport


several = App("several")
_several = several.broker(TwoServersDown())


@_several.subscriber(MemoryStream("orders"))
async def never(n: int) -> None: ...


def make_app() -> App:
    """A factory for ``--factory``."""
    return hooky


async def make_app_async() -> App:
    return hooky


def make_nothing() -> int:
    return 42


def make_broken() -> App:
    raise LookupError("no configuration for this environment")


not_an_app = 42
