"""Apps the start-up signal tests stop at a chosen point of their start-up.

``TS_STARTUP_STAGE`` picks the point, and each prints a line when it gets there, so the test
sends its signal while the process is surely in that stage:

- ``import``: importing this module prints ``importing`` and blocks reading the fifo named
  by ``TS_FIFO`` (an import that waits: a slow module, a connection made at import time);
- ``hook``: the ``on_startup`` hook prints ``in on_startup`` and waits for ever;
- anything else: the app starts and prints ``running`` from its ``after_startup`` hook.

Run as a script (``python -m tests.cli.startup_apps``), it runs ``app`` with ``app.run()``.

``slow`` reads a Redis stream with a consumer group (``TS_TEST_REDIS_URL``); its
``on_startup`` hook prints ``connecting`` just before the broker connects and the group is
created, on a server the test has paused.
"""

from __future__ import annotations

import os

import trio

from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.redis import RedisBroker, RedisStream

STAGE = os.environ.get("TS_STARTUP_STAGE", "")
WORKER = os.environ.get("TRIO_STREAMS_WORKER", "-")


def _say(text: str) -> None:
    # One write: supervised workers share the supervisor's output.
    os.write(1, f"worker {WORKER}: {text}\n".encode())


if STAGE == "import":
    _say("importing")
    with open(os.environ["TS_FIFO"], "rb") as fifo:  # blocks until a writer opens it
        fifo.read()

app = App("starting", shutdown_timeout=30)
_broker = app.broker(MemoryBroker())


@app.on_startup
async def wait_in_hook() -> None:
    if STAGE == "hook":
        _say("in on_startup")
        await trio.sleep_forever()


@app.after_startup
def say_running() -> None:
    _say("running")


@_broker.subscriber(MemoryStream("work"))
async def work(n: int) -> None: ...


slow = App("slow")
_redis = slow.broker(RedisBroker(os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:1")))


@_redis.subscriber(RedisStream("jobs", group="g"))
async def job(n: int) -> None: ...


@slow.on_startup
def say_connecting() -> None:
    _say("connecting")


if __name__ == "__main__":  # app.run() in a script of its own
    raise SystemExit(0 if app.run() else 130)
