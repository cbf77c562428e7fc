"""Serving an app until a read of its subscription ``sub`` fails, for the tests that check what
was read before the failure is still handled."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.support import serving
from trio_streams import App, AppFailed, RunningApp
from trio_streams.core.subscription import SubscriptionState


class FailedRead:
    """Serves an app; a handler waits in :meth:`wait` until subscription ``sub``'s read failed."""

    def __init__(self) -> None:
        self._running: list[RunningApp] = []

    async def wait(self) -> None:
        """Return once the read has failed: the subscription drains what it read."""

        async def draining() -> bool:
            return self._running[0].subscriptions["sub"] is SubscriptionState.DRAINING

        await eventually(draining, what="the failed read")

    async def serve(self, app: App) -> BaseException | None:
        """Serve ``app`` until it stops, which it must by failing; the cause of the failure."""
        with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
            async with serving(app) as served:
                self._running.append(served)
                await served.wait_stopped()
        [error] = failed.value.exceptions
        return error.__cause__
