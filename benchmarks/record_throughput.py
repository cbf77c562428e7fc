"""Recording a Redis stream into a stream file, against its two halves measured in the same run.

One standalone ``redis-server`` (started here, on a free loopback port) holds N entries of a
100-byte payload and two headers. Three figures, each the median of several runs:

- **record**: :func:`trio_streams.record.record_stream` into a new file (XRANGE pages of 1000,
  envelope, append, flush per page, close with fsync);
- **XRANGE alone**: the same pages read and parsed (``parse_entries``), nothing written;
- **writer alone**: the same sealed payloads appended to a :class:`StreamWriter`, flushed every
  1000, closed with fsync; no Redis.

The ratios say how much of the writer's and of XRANGE's speed a recording keeps; recording
cannot beat the slower of the two, and costs about the sum of both per entry.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.redis_servers import redis_server
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.record import record_stream
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.wire import parse_entries

PAYLOAD = bytes(range(100))
HEADERS = {"trace": "0123456789abcdef", "tenant": "eu"}


async def fill(redis: RedisClient, count: int) -> None:
    for start in range(0, count, 1000):
        pipeline = redis.pipeline()
        for n in range(start, min(count, start + 1000)):
            pipeline.add(
                "XADD", "bench", f"{1_700_000_000_000 + n}-0", "_payload", PAYLOAD,
                "h:trace", HEADERS["trace"], "h:tenant", HEADERS["tenant"],
            )  # fmt: skip
        (await pipeline.execute()).raise_first()


async def record(redis: RedisClient, path: Path) -> int:
    """Record the whole stream into ``path``, a file that does not exist yet."""
    writer = StreamWriter(path)
    try:
        summary = await record_stream(redis, "bench", writer)
    finally:
        await writer.aclose()
    return summary.entries


async def xrange_alone(redis: RedisClient) -> int:
    count = 0
    low = "-"
    while True:
        entries = parse_entries(await redis.execute("XRANGE", "bench", low, "+", "COUNT", 1000))
        count += len(entries)
        if len(entries) < 1000:
            return count
        low = f"({entries[-1].id}"


def writer_alone(path: Path, count: int) -> int:
    path.unlink(missing_ok=True)
    writer = StreamWriter(path)
    for n in range(count):
        headers = {**HEADERS, "x-redis-id": f"{1_700_000_000_000 + n}-0"}
        writer.append("bench", seal(PAYLOAD, headers), 1_700_000_000_000 + n)
        if n % 1000 == 999:
            writer.flush()
    writer.close()
    return count


async def main(args: argparse.Namespace) -> None:
    with redis_server() as server, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.ss"
        async with connect(server.url) as redis:
            await fill(redis, args.entries)
            rates: dict[str, list[float]] = {"record": [], "xrange": [], "writer": []}
            for run in range(args.runs):
                began = time.perf_counter()
                n = await record(redis, Path(tmp) / f"record-{run}.ss")
                rates["record"].append(n / (time.perf_counter() - began))
                began = time.perf_counter()
                n = await xrange_alone(redis)
                rates["xrange"].append(n / (time.perf_counter() - began))
                began = time.perf_counter()
                n = writer_alone(path, args.entries)
                rates["writer"].append(n / (time.perf_counter() - began))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{args.entries} entries of 100 bytes + 2 headers, median of {args.runs} runs")
    for name, label in (("record", "record (XRANGE + file)"), ("xrange", "XRANGE alone"),
                        ("writer", "stream-file writer alone")):  # fmt: skip
        print(f"{label:<28} {medians[name] / 1000:8.1f}k entries/s")
    print(f"record / XRANGE alone:  x{medians['record'] / medians['xrange']:.2f} (same run)")
    print(f"record / writer alone:  x{medians['record'] / medians['writer']:.2f} (same run)")
    both = 1 / (1 / medians["xrange"] + 1 / medians["writer"])
    print(f"record / (one after the other, {both / 1000:.1f}k/s):  x{medians['record'] / both:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    trio.run(main, parser.parse_args())
