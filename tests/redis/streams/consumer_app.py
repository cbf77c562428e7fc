"""A consumer process the tests kill: ``python -m tests.redis.streams.consumer_app URL KEY
GROUP CONSUMER MIN_IDLE BEHAVIOUR``.

Each handled message prints ``handling <n> <attempt>`` (flushed) first; then the behaviour:
``ok`` acks (and prints ``handled <n>``), ``slow`` does the same after a millisecond of
work, ``hang`` waits forever (a handler still running when
the process is killed), ``crash`` ends the process at once (``os._exit``), as a message that
crashes its worker would. ``max_attempts=3``, dead letters to ``<KEY>.dead``. SIGTERM stops it
gracefully.
"""

from __future__ import annotations

import os
import sys

import trio

from trio_streams import App, Context, Position
from trio_streams.redis import RedisBroker, RedisStream


def build(url: str, key: str, group: str, consumer: str, min_idle: float, behaviour: str) -> App:
    app = App("consumer")
    broker = app.broker(RedisBroker(url))
    source = RedisStream(
        key, group=group, consumer=consumer, start=Position.beginning(), min_idle=min_idle
    )

    @broker.subscriber(source, max_attempts=3, dead_letter=f"{key}.dead", block=50)
    async def handle(n: int, ctx: Context) -> None:
        if behaviour == "slow":
            await trio.sleep(0.001)  # a millisecond of work
            print(f"handled {n}", flush=True)
            return
        print(f"handling {n} {ctx.attempt}", flush=True)
        if behaviour == "hang":
            await trio.sleep_forever()
        if behaviour == "crash":
            os._exit(3)
        print(f"handled {n}", flush=True)

    return app


if __name__ == "__main__":
    url, key, group, consumer, min_idle, behaviour = sys.argv[1:7]
    build(url, key, group, consumer, float(min_idle), behaviour).run()
