"""Serving an app for the length of a test: in a block, to its end, or lending its handle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ...core.app import App, RunningApp

__all__ = ["Watch", "run_to_end", "serving"]


@asynccontextmanager
async def serving(app: App) -> AsyncIterator[RunningApp]:
    """Run ``app`` in a nursery for the block, then shut it down gracefully."""
    async with trio.open_nursery() as nursery:
        running: RunningApp = await nursery.start(app.serve)
        try:
            yield running
        finally:
            await running.aclose()


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
