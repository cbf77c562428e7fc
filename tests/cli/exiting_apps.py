"""Apps whose own code raises a ``BaseException`` that is not a cancellation: ``sys.exit(3)``
in a handler, a startup hook or a task. ``STREAM_FILE`` names the handler's stream file."""

from __future__ import annotations

import os
import sys

import trio

from trio_streams import App, MemoryBroker, Position
from trio_streams.file import FileBroker, FileStream

PATH = os.environ.get("STREAM_FILE", "unused.ss")

# A handler that exits the interpreter on the second message; a second subscription that
# is idle, so stopping drains more than the one that failed.
handler_exits = App("exits")
_exits = handler_exits.broker(FileBroker(PATH))
seen: list[int] = []


@_exits.subscriber(
    FileStream("orders", durable="exits", start_at=Position.beginning()), name="orders"
)
async def h(n: int) -> None:
    seen.append(n)
    if len(seen) == 2:
        sys.exit(3)


@_exits.subscriber(FileStream("other"), name="other")
async def idle(n: int) -> None: ...


# A startup hook that exits.
hook_exits = App("hook-exits")
hook_exits.broker(MemoryBroker())


@hook_exits.on_startup
async def configure() -> None:
    sys.exit(4)


# A task that raises a BaseException of its own kind once the app runs.
class Shutdown(BaseException):
    """Not an ``Exception``: the failure policy and ``except Exception`` do not see it."""


task_exits = App("task-exits")
task_exits.broker(MemoryBroker())


@task_exits.task
async def heartbeat() -> None:
    await trio.lowlevel.checkpoint()
    raise Shutdown("the heartbeat gave up")
