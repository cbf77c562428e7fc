"""Small apps on real stream files, shared by the transport tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from trio_streams import App, Context, Position, RunningApp
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter

from ..support import serving

Handler = Callable[..., Awaitable[Any]]
E = TypeVar("E", bound=BaseException)


async def refused_at_start(app: App, error: type[E]) -> E:
    """The one ``error`` that stops ``app`` from starting."""
    with pytest.RaisesGroup(pytest.RaisesExc(error), flatten_subgroups=True) as raised:
        async with serving(app):
            pass  # pragma: no cover - the start fails
    [refusal] = raised.value.exceptions
    assert isinstance(refusal, error)
    return refusal


def write_numbers(
    path: Path, count: int, *, key: str = "s", beacon_interval: int = 1024, first: int = 1
) -> None:
    """Append messages whose payload is their sequence number (``first``..``first+count-1``)."""
    with StreamWriter(path, beacon_interval=beacon_interval) as writer:
        for n in range(first, first + count):
            seq, _, _ = writer.append(key, str(n).encode())
            assert seq == n, f"{path} already held messages of {key!r}"


def write_at_instants(path: Path, instants: list[int], *, key: str = "s") -> None:
    """Append messages whose payload is their sequence number, the n-th written at
    ``instants[n - 1]`` (Unix epoch milliseconds)."""
    with StreamWriter(path, beacon_interval=1024) as writer:
        for n, ms in enumerate(instants, 1):
            seq, _, _ = writer.append(key, str(n).encode(), timestamp_ms=ms)
            assert seq == n, f"{path} already held messages of {key!r}"


def file_app(path: Path, *, name: str = "file", **options: Any) -> tuple[App, FileBroker]:
    """An app with one ``FileBroker`` on ``path`` (``options`` are the broker's)."""
    app = App(name)
    return app, app.broker(FileBroker(path, **options))


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
    app, broker = file_app(path, existing_only=True)
    broker.subscriber(
        stream if stream is not None else FileStream("s").replay(),
        workers=workers,
        buffer=buffer,
        count=count,
        name="sub",
    )(handler)
    return app, broker


async def replay_with_seeks(
    path: Path, seeks: Mapping[tuple[int, int], Position], **options: Any
) -> list[int]:
    """Replay a file of ``write_numbers`` messages; on the k-th delivery of message n, seek to
    ``seeks[(n, k)]``. Returns the messages in the order they were handled."""
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        target = seeks.get((n, seen.count(n)))
        if target is not None:
            await ctx.seeker.seek(target)

    await run_to_end(replay_app(path, handle, **options)[0])
    return seen


class Watch:
    """Serves an app and lends its running handle to handlers (stats, stopping their own app)."""

    def __init__(self) -> None:
        self._started = trio.Event()
        self._running: RunningApp | None = None

    async def running(self) -> RunningApp:
        await self._started.wait()
        assert self._running is not None
        return self._running

    async def run_to_end(self, app: App, *, seconds: float = 20) -> None:
        """Serve ``app`` until it stops (by itself, or asked to)."""
        with trio.fail_after(seconds):
            async with trio.open_nursery() as nursery:
                self._running = await nursery.start(app.serve)
                self._started.set()
                await self._running.wait_stopped()


async def run_to_end(app: App, *, seconds: float = 20) -> None:
    """Serve ``app`` until it stops by itself (every subscription ended)."""
    await Watch().run_to_end(app, seconds=seconds)
