"""Apps ``trio-streams run`` runs in the CLI tests. ``STREAM_FILE`` names their stream file;
``FAILS`` is how many times ``flaky``'s handler fails before it succeeds."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from trio_streams import App, Context, MemoryBroker, MemoryStream, Position
from trio_streams.core.extras import MissingExtra
from trio_streams.core.transport import Transport
from trio_streams.file import FileBroker, FileStream

PATH = os.environ.get("STREAM_FILE", "unused.ss")
FAILS = int(os.environ.get("FAILS", "2"))

# A file that must exist and does not.
missing = App("missing")
_missing = missing.broker(FileBroker(PATH, existing_only=True))


@_missing.subscriber(FileStream("orders").replay())
async def read_missing(n: int) -> None: ...


# A replay of a file given by a path that may be mistyped: nothing creates it.
typo = App("typo")
_typo = typo.broker(FileBroker(PATH))


@_typo.subscriber(FileStream("orders").replay())
async def read_typo(n: int) -> None: ...


# A startup hook that fails.
hooky = App("hooky")
hooky.broker(MemoryBroker())


@hooky.on_startup
async def connect_database() -> None:
    raise RuntimeError("database unreachable")


# A service consuming orders with retries and a dead letter while scripts publish to the file:
# a payload {"id": n, "fail": k} fails its first k deliveries. Prints what it handles.
service = App("service")
_service = service.broker(FileBroker(PATH, durable_interval=0.01))


@dataclass
class Order:
    id: int
    fail: int


@_service.subscriber(
    FileStream("orders", durable="svc", start_at=Position.beginning()),
    max_attempts=3,
    dead_letter="orders.dead",
    name="orders",
)
async def take(order: Order, ctx: Context) -> None:
    os.write(1, b"handled %d %d\n" % (order.id, ctx.attempt))
    if ctx.attempt <= order.fail:
        raise ValueError(f"order {order.id} failed on attempt {ctx.attempt}")


@_service.subscriber(FileStream("orders.dead", start_at=Position.beginning()), name="dead")
async def dead(order: Order) -> None:
    os.write(1, b"dead %d\n" % order.id)


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


def make_without_extra() -> App:
    """A factory whose app needs an extra that is not there (as RedisBroker without hiredis)."""
    raise MissingExtra("http", "the app's endpoint")


not_an_app = 42
