"""The Redis pipeline window: a handler's INCR sent with the read's XACK vs awaited per message.

One run starts a fresh ``redis-server`` (no persistence, loopback), and per round prefills one
stream per contender (``--entries`` entries, each naming one of ``COUNTERS`` counters) and
drains it through a consumer group with ``count=100``, a handler doing one ``INCR`` of its
entry's counter per message:

- **window**: ``pipeline=True``; the handler queues ``ctx.pipeline.incr(key)`` (never awaited)
  and the window sends the read's INCRs and its one ``XACK`` in one pipeline;
- **window, atomic=True**: the same, each delivery's INCR and its own XACK in one
  ``MULTI``/``EXEC``, the read's segments still in one pipeline;
- **awaited**: no window; the handler awaits ``INCR`` on the broker's own client (the pooled
  client the broker settles with: what a handler has without opening a second client) before
  it returns; the read's ``XACK`` still goes as one command;
- with ``--faststream-python PATH`` (an interpreter with ``faststream[redis]`` 0.7.0 and
  ``hiredis`` installed, which redis-py then parses with; kept out of this project's
  environment and checked before anything runs, see ``_redis_peers.py``): **FastStream**
  under asyncio in a subprocess (``_faststream_peer.py incr``), a ``StreamSub`` of the same
  group shape, ``max_records=100``, its per-message logging off, the handler awaiting ``INCR``
  on its broker's connection (the ``Redis`` annotation); FastStream sends one ``XACK`` per
  message. It drains as many entries as the others.

Each figure is the median of ``--runs`` rounds, the contenders alternating (so a disturbance
hits all of them). A contender's clock runs from starting its app until its handler has run for
every entry (for the window, the last read's flush is then still one round trip away; it is
checked below, not timed). After each round the script checks every counter's value and that
the group's pending list is empty, and fails if not.

**Round trips counted, not assumed.** In this process every write of a Redis connection
(``Connection._send``: one call per command or pipeline) is counted and classified: the
``XREADGROUP`` reads, the writes holding an ``XACK`` (the flushes), the writes holding an
``INCR`` but no ``XACK``, and the rest (leases, reclaim, delayed-retry promotion). At the
server, ``CONFIG RESETSTAT`` before a contender and ``INFO stats commandstats`` after it give
``total_reads_processed`` (socket reads, all connections), ``total_commands_processed``, the
``XACK`` / ``INCR`` calls, and the microseconds the server spent executing commands (every
command's ``usec``): per message, next to the wall clock's microseconds per message, the
server's own share of the time. "Per read" divides by the reads that returned entries
(entries / COUNT). One pipeline write per read means one XACK write per read and no INCR
written on its own.

The machine has 2 cores shared by the server and the clients: compare the ratios.

Run: ``python benchmarks/redis_window.py [--entries N] [--runs N] [--server NAME|PATH]
[--faststream-python PATH]`` (``--server``: the server binary, as the tests
choose it; see ``redis_drain_args``).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass, replace
from pathlib import Path

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import redis_drain_args

from tests.redis_servers import redis_server
from trio_streams import App, Context, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.broker import RedisTransport
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.client.connection import Connection

COUNT = 100
#: Entry ``i`` names counter ``i % COUNTERS``.
COUNTERS = 1000
AIM_RATE = 50_000
AIM_VS_AWAITED = 5.0
AIM_VS_FASTSTREAM = 30.0

_XREADGROUP = b"$10\r\nXREADGROUP\r\n"
_XACK = b"$4\r\nXACK\r\n"
_INCR = b"$4\r\nINCR\r\n"


@dataclass
class Writes:
    """What this process wrote to Redis, one count per ``Connection._send`` (a command or a
    whole pipeline)."""

    xreadgroup: int = 0
    with_xack: int = 0
    #: INCRs inside the writes that hold an XACK.
    incrs_with_xack: int = 0
    incr_without_xack: int = 0
    other: int = 0

    def saw(self, data: bytes) -> None:
        if _XREADGROUP in data:
            self.xreadgroup += 1
        elif _XACK in data:
            self.with_xack += 1
            self.incrs_with_xack += data.count(_INCR)
        elif _INCR in data:
            self.incr_without_xack += 1
        else:
            self.other += 1

    def since(self, before: Writes) -> Writes:
        return Writes(*(a - b for a, b in zip(astuple(self), astuple(before), strict=True)))

    @property
    def total(self) -> int:
        return self.xreadgroup + self.with_xack + self.incr_without_xack + self.other


@dataclass
class Server:
    """``INFO stats commandstats`` since the last ``CONFIG RESETSTAT``."""

    reads: int
    commands: int
    xack: int
    incr: int
    exec: int
    #: Microseconds the server spent executing commands (every ``cmdstat_*``'s ``usec``):
    #: its own share of a contender's time, next to the wall clock's.
    usec: int


@dataclass
class Round:
    """One contender's round: its rate, and its traffic (client side None for the peer)."""

    rate: float
    entries: int
    writes: Writes | None
    server: Server


_writes = Writes()


@contextmanager
def counting_writes() -> Iterator[None]:
    """Count every write of this process's Redis connections into ``_writes``."""
    original = Connection._send

    async def send(self: Connection, data: bytes) -> None:
        _writes.saw(data)
        await original(self, data)

    Connection._send = send  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection._send = original  # type: ignore[method-assign]


def counter(key: str, n: int) -> str:
    return f"{key}:n:{n}"


async def prefill(redis: RedisClient, key: str, entries: int) -> None:
    await redis.execute("DEL", key, *(counter(key, n) for n in range(COUNTERS)))
    for start in range(0, entries, 1000):
        pipeline = redis.pipeline()
        for i in range(start, min(start + 1000, entries)):
            pipeline.add("XADD", key, "*", "_payload", str(i % COUNTERS))
        (await pipeline.execute()).raise_first()


def _info(text: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _calls(stat: str | None, field: str = "calls") -> int:
    if stat is None:
        return 0
    return int(dict(part.split("=") for part in stat.split(","))[field])


async def server_stats(redis: RedisClient) -> Server:
    info = _info((await redis.execute("INFO", "stats", "commandstats")).decode())
    return Server(
        reads=int(info["total_reads_processed"]),
        commands=int(info["total_commands_processed"]),
        xack=_calls(info.get("cmdstat_xack")),
        # redis-py (FastStream's client) sends ``incr`` as INCRBY key 1
        incr=_calls(info.get("cmdstat_incr")) + _calls(info.get("cmdstat_incrby")),
        exec=_calls(info.get("cmdstat_exec")),
        usec=sum(_calls(v, "usec") for k, v in info.items() if k.startswith("cmdstat_")),
    )


async def verify(redis: RedisClient, key: str, entries: int, what: str) -> None:
    """Every counter holds the number of entries naming it, and nothing is pending."""
    values = await redis.execute("MGET", *(counter(key, n) for n in range(COUNTERS)))
    expected = [entries // COUNTERS + (n < entries % COUNTERS) for n in range(COUNTERS)]
    got = [0 if v is None else int(v) for v in values]
    wrong = [(n, e, g) for n, (e, g) in enumerate(zip(expected, got, strict=True)) if e != g]
    if wrong:
        raise AssertionError(f"{what}: {len(wrong)} counters wrong (n, want, got): {wrong[:5]}")
    pending = (await redis.execute("XPENDING", key, "g"))[0]
    if pending != 0:
        raise AssertionError(f"{what}: {pending} entries still pending after the run")
    await redis.execute("DEL", key, *(counter(key, n) for n in range(COUNTERS)))


async def measured(
    url: str,
    key: str,
    entries: int,
    what: str,
    run: Callable[[], Awaitable[float]],
    *,
    counted: bool = True,
) -> Round:
    """Prefill, reset the server's counters and ours, run, take both, verify. ``counted``:
    the contender writes from this process (the peer's writes are another process's)."""
    async with connect(url) as redis:
        await prefill(redis, key, entries)
        await redis.execute("CONFIG", "RESETSTAT")
        before = replace(_writes)
        rate = await run()
        after = _writes.since(before)
        server = await server_stats(redis)
        await verify(redis, key, entries, what)
    return Round(rate, entries, after if counted else None, server)


async def trio_streams_app(url: str, key: str, entries: int, mode: str) -> float:
    """Drain ``key`` with one INCR per message: ``window``, ``atomic`` or ``awaited``."""
    app = App("bench")
    broker = app.broker(RedisBroker(url))
    handled = 0
    done = trio.Event()
    source = RedisStream(key, group="g", start=Position.beginning())

    def handled_one() -> None:
        nonlocal handled
        handled += 1
        if handled == entries:
            done.set()

    if mode == "awaited":

        @broker.subscriber(source, name="count", count=COUNT)
        async def awaited(body: bytes) -> None:
            transport = broker.transport
            assert isinstance(transport, RedisTransport)
            await transport.client.execute("INCR", counter(key, int(body)))
            handled_one()

    else:

        @broker.subscriber(
            source, name="count", count=COUNT, pipeline=True, atomic=mode == "atomic"
        )
        async def window(body: bytes, ctx: Context) -> None:
            ctx.pipeline.incr(counter(key, int(body)))
            handled_one()

    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        running = await nursery.start(app.serve)
        await done.wait()
        elapsed = time.perf_counter() - started
        await running.aclose()
    if handled != entries:
        raise AssertionError(f"{mode}: {handled} deliveries for {entries} entries")
    return entries / elapsed


async def faststream(python: str, url: str, key: str, entries: int) -> float:
    async with connect(url) as redis:
        # Its group starts at the stream's start, as the others' do (the peer reads ">").
        await redis.execute("XGROUP", "CREATE", key, "g", "0")
    peer = str(Path(__file__).with_name("_faststream_peer.py"))
    command = [python, peer, url, key, str(entries), "incr"]
    done = await trio.run_process(command, capture_stdout=True)
    return float(done.stdout.decode().split()[-1])


async def peer_version(python: str) -> str:
    code = "from importlib.metadata import version; print(version('faststream'))"
    done = await trio.run_process([python, "-c", code], capture_stdout=True)
    return done.stdout.decode().strip()


def _median(rounds: list[Round], value: Callable[[Round], float]) -> float:
    return statistics.median(value(r) for r in rounds)


def traffic(name: str, rounds: list[Round]) -> str:
    """One contender's round trips: client writes and server counts, per read of COUNT."""
    entries = rounds[0].entries
    reads = math.ceil(entries / COUNT)
    line = f"{name:<11}"
    counted = [r.writes for r in rounds if r.writes is not None]
    if counted:

        def writes(value: Callable[[Writes], int]) -> float:
            return statistics.median(value(w) for w in counted)

        line += (
            f" client: {writes(lambda w: w.with_xack) / reads:4.2f} XACK writes/read,"
            f" {writes(lambda w: w.total) / reads:6.2f} writes/read"
            f" (XREADGROUP {writes(lambda w: w.xreadgroup):.0f},"
            f" with XACK {writes(lambda w: w.with_xack):.0f}"
            f" carrying {writes(lambda w: w.incrs_with_xack):.0f} INCR,"
            f" INCR alone {writes(lambda w: w.incr_without_xack):.0f},"
            f" other {writes(lambda w: w.other):.0f});"
        )
    else:
        line += " client: another process, not counted;"
    return line + (
        f" server: {_median(rounds, lambda r: r.server.reads) / reads:6.2f} reads/read,"
        f" {_median(rounds, lambda r: r.server.commands) / entries:4.2f} commands/msg"
        f" (XACK {_median(rounds, lambda r: r.server.xack):.0f},"
        f" INCR/INCRBY {_median(rounds, lambda r: r.server.incr):.0f},"
        f" EXEC {_median(rounds, lambda r: r.server.exec):.0f}),"
        f" {_median(rounds, lambda r: r.server.usec) / entries:4.2f} us/msg executing"
        f" of {1e6 / _median(rounds, lambda r: r.rate):5.2f} us/msg wall"
    )


def aim(ratio: float, target: float) -> str:
    return f"{ratio:.1f}x (aim >= {target:.0f}x: {'met' if ratio >= target else 'NOT met'})"


async def main(entries: int, runs: int, peer_python: str | None) -> None:
    results: dict[str, list[Round]] = {"window": [], "atomic": [], "awaited": []}
    with redis_server() as server, counting_writes():
        url = server.url
        for run in range(runs):
            for mode in ("window", "atomic", "awaited"):
                key = f"{mode}-{run}"

                async def contender(key: str = key, mode: str = mode) -> float:
                    return await trio_streams_app(url, key, entries, mode)

                results[mode].append(await measured(url, key, entries, mode, contender))
            if peer_python is not None:
                key = f"fs-{run}"

                async def peer(key: str = key, python: str = peer_python) -> float:
                    return await faststream(python, url, key, entries)

                got = await measured(url, key, entries, "FastStream", peer, counted=False)
                results.setdefault("faststream", []).append(got)
        version = await peer_version(peer_python) if peer_python is not None else ""
    rates = {name: _median(rounds, lambda r: r.rate) for name, rounds in results.items()}
    window = rates["window"]
    print(f"entries per run: {entries}, COUNT {COUNT}, one INCR per message, runs: {runs}")
    print(f"window (pipeline=True):              {window:10.0f} msgs/s"
          f"   (aim >= {AIM_RATE}: {'met' if window >= AIM_RATE else 'NOT met'})")  # fmt: skip
    print(f"window, atomic=True:                 {rates['atomic']:10.0f} msgs/s")
    print(f"awaited INCR (the broker's client):  {rates['awaited']:10.0f} msgs/s")
    if "faststream" in rates:
        print(
            f"FastStream {version} awaited INCR:      {rates['faststream']:10.0f} msgs/s"
            f"   ({entries} entries per run)"
        )
    print(f"window / awaited:    {aim(window / rates['awaited'], AIM_VS_AWAITED)}")
    if "faststream" in rates:
        print(f"window / FastStream: {aim(window / rates['faststream'], AIM_VS_FASTSTREAM)}")
    print(f"atomic / window: {rates['atomic'] / window:.2f}; "
          f"atomic / awaited: {rates['atomic'] / rates['awaited']:.1f}x")  # fmt: skip
    print("checked each round: every counter's value, the group's pending list empty")
    print(f"round trips (medians; per read = per {COUNT} entries):")
    for name, rounds in results.items():
        print("  " + traffic(name, rounds))


if __name__ == "__main__":
    args = redis_drain_args(__doc__.splitlines()[0])
    trio.run(main, args.entries, args.runs, args.faststream_python)
