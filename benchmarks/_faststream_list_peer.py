"""The FastStream peer of ``redis_list_consume.py``: drain a prefilled list under asyncio.

Modes: ``message`` — FastStream's list subscriber (``BLPOP``, one entry per round trip, a no-op
handler per message); ``batch`` — its batch list subscriber (``LPOP ... COUNT 100``, a no-op
handler per batch). Both are at-most-once: an entry popped by a process that dies is gone.

Run by that script with ``--faststream-python PATH``, an interpreter that has
``faststream[redis]`` 0.7.0 and ``hiredis`` installed (redis-py parses replies with hiredis
when it can; the peer refuses to run without it, see ``_redis_peers.py``):
``python _faststream_list_peer.py URL KEY ENTRIES MODE`` prints the msgs/s it reached (until
the handler has run for every one of the ``ENTRIES`` entries, all that the script prefilled).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from _redis_peers import require_hiredis


async def main(url: str, key: str, entries: int, mode: str) -> None:
    from faststream.redis import ListSub, RedisBroker

    broker = RedisBroker(url, logger=None)  # no log line per message: the fairest figure
    done = asyncio.Event()
    handled = 0
    batch = mode == "batch"
    source = ListSub(key, batch=batch, max_records=100)

    @broker.subscriber(list=source)  # type: ignore[untyped-decorator]
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
