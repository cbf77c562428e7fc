"""A windowed consumer process the tests kill: ``python -m tests.redis.window.window_app URL
KEY GROUP CONSUMER MODE`` (MODE ``atomic`` or ``plain``).

The subscription is a group member with ``pipeline=True`` (and ``atomic=True`` in mode
``atomic``), COUNT 20, every other setting at its default. The handler takes a millisecond of
work, then queues side effects that name its entry — ``SADD applied <n>`` and
``INCR count:<n>`` — and a ``SET pad`` of 64 KiB, so that one flush (a read's segments and its
XACK) is larger than the socket buffers and reaches the server in several pieces: a kill can
land inside a flush, not only between flushes. Then it acks: the window sends the segment with
the read's settle. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import sys

import trio

from trio_streams import App, Context
from trio_streams.redis import RedisBroker, RedisStream

COUNT = 20
PAD = b"x" * 65536


def build(url: str, key: str, group: str, consumer: str, mode: str) -> App:
    if mode not in ("atomic", "plain"):
        raise SystemExit(f"mode is 'atomic' or 'plain', not {mode!r}")
    app = App("window")
    broker = app.broker(RedisBroker(url))
    source = RedisStream(key, group=group, consumer=consumer)

    @broker.subscriber(source, pipeline=True, atomic=mode == "atomic", count=COUNT)
    async def handle(n: int, ctx: Context) -> None:
        await trio.sleep(0.001)  # a millisecond of work
        ctx.pipeline.sadd("applied", n)
        ctx.pipeline.incr(f"count:{n}")
        ctx.pipeline.set("pad", PAD)

    return app


if __name__ == "__main__":
    url, key, group, consumer, mode = sys.argv[1:6]
    build(url, key, group, consumer, mode).run()
