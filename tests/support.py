"""Small helpers shared by the tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from trio_streams import App, RunningApp


@asynccontextmanager
async def serving(app: App) -> AsyncIterator[RunningApp]:
    """Run ``app`` in a nursery for the block, then shut it down gracefully."""
    async with trio.open_nursery() as nursery:
        running: RunningApp = await nursery.start(app.serve)
        try:
            yield running
        finally:
            await running.aclose()
