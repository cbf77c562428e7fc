"""The FastStream peer of ``request_reply.py``: request-reply round trips under asyncio.

One process holds both ends, as each contender of ``request_reply.py`` does: a
``RedisBroker`` whose ``StreamSub`` subscriber (a consumer group, ``XREADGROUP``) answers each
request with its payload doubled, and callers awaiting ``broker.request(n, stream=KEY)``, the
documented way to ask (FastStream subscribes to a fresh reply channel for each request, publishes
the request with it as ``reply_to``, and the subscriber publishes the handler's return value
there). Its per-message logging is off: the fairest figure.

Run by ``request_reply.py`` with an interpreter that has ``faststream[redis]`` 0.7.0 and
``hiredis`` installed (redis-py parses with hiredis when it can; the peer refuses to run
without it, see ``_redis_peers.py``):
``python _faststream_rr_peer.py URL KEY IN_FLIGHT REQUESTS WARMUP`` answers ``WARMUP`` requests,
then (timed) ``REQUESTS``, each time from ``IN_FLIGHT`` callers at once, each caller checking
its reply and sending its next request when it has it, and prints one JSON line: the
FastStream version, the seconds the timed part took, and each request's round trip in
nanoseconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from importlib.metadata import version
from typing import Any

from _redis_peers import require_hiredis


async def main(url: str, key: str, in_flight: int, requests: int, warmup: int) -> None:
    from faststream.redis import RedisBroker, StreamSub

    broker = RedisBroker(url, logger=None)

    @broker.subscriber(stream=StreamSub(key, group="g", consumer="c"))  # type: ignore[untyped-decorator]
    async def double(n: int) -> int:
        return n * 2

    async def ask(n: int) -> int:
        reply: Any = await broker.request(n, stream=key, timeout=30)
        value = await reply.decode()
        if value != 2 * n:
            raise AssertionError(f"request {n}: the reply is {value!r}, not {2 * n}")
        return time.perf_counter_ns()

    async def callers(count: int) -> list[int]:
        latencies: list[int] = []
        numbers = iter(range(count))

        async def caller() -> None:
            for n in numbers:
                sent = time.perf_counter_ns()
                latencies.append(await ask(n) - sent)

        await asyncio.gather(*(caller() for _ in range(in_flight)))
        return latencies

    await broker.start()
    try:
        await callers(warmup)
        started = time.perf_counter()
        latencies = await callers(requests)
        elapsed = time.perf_counter() - started
    finally:
        await broker.stop()
    print(json.dumps({"version": version("faststream"), "elapsed": elapsed, "ns": latencies}))


if __name__ == "__main__":
    require_hiredis()
    url, key, in_flight, requests, warmup = sys.argv[1:6]
    asyncio.run(main(url, key, int(in_flight), int(requests), int(warmup)))
