"""Small apps on real stream files, shared by the transport tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from trio_streams import App
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter

Handler = Callable[..., Awaitable[Any]]


def write_numbers(
    path: Path, count: int, *, key: str = "s", beacon_interval: int = 1024, first: int = 1
) -> None:
    """Append messages whose payload is their sequence number (``first``..``first+count-1``)."""
    with StreamWriter(path, beacon_interval=beacon_interval) as writer:
        for n in range(first, first + count):
            seq, _, _ = writer.append(key, str(n).encode())
            assert seq == n, f"{path} already held messages of {key!r}"


def replay_app(
    path: Path,
    handler: Handler,
    *,
    workers: int = 1,
    buffer: int = 4,
    count: int = 4,
    stream: FileStream | None = None,
) -> tuple[App, FileBroker]:
    """An app replaying the file with ``handler`` mounted as subscription ``sub``."""
    app = App("file")
    broker = app.broker(FileBroker(path, existing_only=True))
    broker.subscriber(
        stream if stream is not None else FileStream("s").replay(),
        workers=workers,
        buffer=buffer,
        count=count,
        name="sub",
    )(handler)
    return app, broker


async def run_to_end(app: App, *, seconds: float = 20) -> None:
    """Serve ``app`` until it stops by itself (every subscription ended)."""
    with trio.fail_after(seconds):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
