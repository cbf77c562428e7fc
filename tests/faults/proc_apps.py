"""Apps that ``tests/faults/test_processes.py`` runs in subprocesses and kills.

Each is configured by environment variables (``trio-streams run`` takes the app, not its
settings) and prints, flushed, one line per step a test checks:

- ``file_consumer``: reads key ``orders`` of ``PROCS_FILE`` from the beginning, then follows
  it live, as durable consumer ``billing`` (``PROCS_WORKERS`` workers, default 1); prints
  ``handled <n>`` per message; runs until it is stopped.
- ``group_consumer``: consumer ``c1`` of group ``g`` of stream ``PROCS_KEY`` at ``PROCS_URL``;
  ``list_consumer``: the reliable list ``PROCS_KEY`` there, consumer ``c1`` (a heartbeat of
  a second, so a successor takes over soon). Both print
  ``begin <n> <attempt>`` as a run begins, then pass a checkpoint, then print ``end <n>``.
- ``file_publisher``: a task that publishes ``PROCS_COUNT`` messages ``p:<i>`` to key
  ``k<i % 3>`` of ``PROCS_FILE``, printing ``ack <i>`` after each publish returned, then
  ``done``.
"""

from __future__ import annotations

import os

import trio

from trio_streams import App, Context, Position
from trio_streams.file import FileBroker, FileStream


def _print(line: str) -> None:
    os.write(1, line.encode() + b"\n")  # one write per line: a pipe never splits it


def file_consumer() -> App:
    app = App("file-consumer")
    broker = app.broker(
        FileBroker(os.environ["PROCS_FILE"], existing_only=True, durable_interval=0.02)
    )

    @broker.subscriber(
        FileStream("orders", durable="billing", start_at=Position.beginning()),
        workers=int(os.environ.get("PROCS_WORKERS", "1")),
    )
    async def handle(n: int) -> None:
        await trio.lowlevel.checkpoint()
        _print(f"handled {n}")

    return app


def _redis_consumer(name: str, source: object) -> App:
    from trio_streams.redis import RedisBroker

    app = App(name)
    broker = app.broker(RedisBroker(os.environ["PROCS_URL"]))

    @broker.subscriber(source, block=50, max_attempts=5)  # type: ignore[arg-type]
    async def handle(n: int, ctx: Context) -> None:
        _print(f"begin {n} {ctx.attempt}")
        await trio.lowlevel.checkpoint()
        _print(f"end {n}")

    return app


def group_consumer() -> App:
    from trio_streams.redis import RedisStream

    source = RedisStream(
        os.environ["PROCS_KEY"], group="g", consumer="c1", start=Position.beginning()
    )
    return _redis_consumer("group-consumer", source)


def list_consumer() -> App:
    from trio_streams.redis import RedisList

    return _redis_consumer(
        "list-consumer",
        RedisList(os.environ["PROCS_KEY"], reliable=True, consumer="c1", heartbeat=1.0),
    )


def file_publisher() -> App:
    app = App("file-publisher")  # no subscription: it runs until it is stopped
    broker = app.broker(FileBroker(os.environ["PROCS_FILE"]))
    count = int(os.environ["PROCS_COUNT"])

    @app.task
    async def publish() -> None:
        for i in range(count):
            await broker.publish(f"k{i % 3}", f"p:{i}".encode())
            _print(f"ack {i}")
        _print("done")

    return app
