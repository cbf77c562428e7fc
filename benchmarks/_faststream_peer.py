"""The FastStream peer of ``redis_stream_consume.py`` and ``redis_window.py``: drain a
prefilled stream through a consumer group under asyncio.

Modes: ``message`` and ``batch``, a no-op handler per message or per batch
(``redis_stream_consume.py``); ``incr``, a handler per message that awaits one ``INCR`` of the
counter its entry names (``KEY:n:<payload>``) on the broker's own Redis connection, the
documented ``Redis`` annotation (``redis_window.py``). FastStream acknowledges each message
with its own ``XACK`` after the handler returns.

Run by those scripts with ``--faststream-python PATH``, an interpreter that has
``faststream[redis]`` 0.7.0 and ``hiredis`` installed (redis-py parses replies with hiredis
when it can; the peer refuses to run without it, see ``_redis_peers.py``):
``python _faststream_peer.py URL KEY ENTRIES MODE`` prints the msgs/s it reached (until the
handler has run for every one of the ``ENTRIES`` entries, all that the script prefilled).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from _redis_peers import require_hiredis


async def main(url: str, key: str, entries: int, mode: str) -> None:
    from faststream.redis import RedisBroker, StreamSub
    from faststream.redis.annotations import Redis

    broker = RedisBroker(url, logger=None)  # no log line per message: the fairest figure
    done = asyncio.Event()
    handled = 0
    batch = mode == "batch"
    # The group is created at the stream's start by the script (as the framework's is): with
    # its default ``last_id=">"`` FastStream reads new entries (its ``XGROUP CREATE ... $`` then
    # finds the group there). ``last_id="0"`` would read this consumer's own pending entries,
    # none, for ever.
    source = StreamSub(key, group="g", consumer="c", max_records=100, batch=batch)

    if mode == "incr":

        @broker.subscriber(stream=source)  # type: ignore[untyped-decorator]
        async def count(body: Any, redis: Redis) -> None:
            nonlocal handled
            await redis.incr(f"{key}:n:{body['_payload']}")
            handled += 1
            if handled >= entries:
                done.set()

    else:

        @broker.subscriber(stream=source)  # type: ignore[untyped-decorator]
        async def handle(body: Any) -> None:
            nonlocal handled
            handled += len(body) if batch else 1
            if handled >= entries:
                done.set()

    started = time.perf_counter()
    await broker.start()
    await done.wait()
    elapsed = time.perf_counter() - started
    await broker.stop()
    print(entries / elapsed)


if __name__ == "__main__":
    require_hiredis()
    url, key, entries, mode = sys.argv[1:5]
    asyncio.run(main(url, key, int(entries), mode))
