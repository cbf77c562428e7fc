"""A list consumer process the tests kill: ``python -m tests.redis.lists.list_app URL KEY
FORM CONSUMER HEARTBEAT BEHAVIOUR``.

``FORM`` is ``simple`` or ``reliable`` (``CONSUMER`` names a reliable one). Each handled message
prints ``handled <n>`` (flushed) once its handler is done; ``ok`` handles at once, ``slow``
after a millisecond of work, ``poison`` (one entry per read, one worker) handles at once
except ``0``, which kills its process (SIGKILL, as a segfault or the OOM killer would). Every
form has ``max_attempts=3`` and the dead letter ``<KEY>.dead`` (a list). Otherwise reads of 50
entries (``count=50``), ``workers=8``, so a kill lands mid-batch. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import os
import signal
import sys

import trio

from trio_streams import App
from trio_streams.redis import RedisBroker, RedisList


def build(url: str, key: str, form: str, consumer: str, heartbeat: float, behaviour: str) -> App:
    app = App("list-consumer")
    broker = app.broker(RedisBroker(url))
    if form == "reliable":
        source = RedisList(key, reliable=True, consumer=consumer, heartbeat=heartbeat)
    else:
        source = RedisList(key)

    count, workers = (1, 1) if behaviour == "poison" else (50, 8)

    @broker.subscriber(
        source,
        count=count,
        workers=workers,
        block=50,
        max_attempts=3,
        dead_letter=f"{key}.dead",
    )
    async def handle(n: int) -> None:
        if behaviour == "slow":
            await trio.sleep(0.001)  # a millisecond of work
        elif behaviour == "poison" and n == 0:
            print("poisoned", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        print(f"handled {n}", flush=True)

    return app


if __name__ == "__main__":
    url, key, form, consumer, heartbeat, behaviour = sys.argv[1:7]
    build(url, key, form, consumer, float(heartbeat), behaviour).run()
