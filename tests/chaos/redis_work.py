"""The Redis workloads: a group on a stream (standalone and cluster), the pipeline window and
the atomic window, reliable and simple lists, Pub/Sub.

Each publishes numbered messages straight to the server at a steady pace while a seeded
schedule injects faults into the consumers' side: their processes killed (SIGKILL) or stopped
(SIGTERM) and restarted under the same name, and — where a fault proxy stands between the
consumers and the server — connections cut, reset in the middle of a reply, blackholed or
delayed. Then (on the transports that keep messages) a backlog is published at once and one
consumer is stopped five times while it drains. Faults are then healed, the workload waits for
every message to settle, stops its consumers gracefully and computes its row from the run log
and what the server still holds.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key

from .consumer import effects_key
from .history import Row, Runs, row_from
from .procs import Consumers

#: Seconds a workload waits for its messages to settle once faults are healed.
SETTLE_WITHIN = 90.0

#: A proxy fault: injects one fault and returns a function that heals it (or ``None`` when
#: the fault heals by itself, a cut); ``kind`` names it in the table's counts.
ProxyFault = Callable[[random.Random], Awaitable[tuple[str, Callable[[], Awaitable[None]] | None]]]


@dataclass(frozen=True)
class Size:
    """How big one workload is: seconds of steady publishing, messages a second, the backlog
    published at once, and the mean pause between two faults."""

    seconds: float
    rate: int
    backlog: int
    fault_every: float

    @property
    def messages(self) -> int:
        return int(self.seconds * self.rate) + self.backlog


@dataclass
class Workload:
    """One Redis workload: its kind (``tests.chaos.consumer``'s), the transport's name in the
    table, the key, the consumers' and the publisher's URLs."""

    name: str
    kind: str
    key: str
    consumer_url: str
    redis: RedisClient
    directory: Path
    seed: int
    size: Size
    consumers: int = 2
    proxy_faults: ProxyFault | None = None
    #: Healing every proxy fault (``proxy.heal()``), called once faults end.
    heal: Callable[[], Awaitable[None]] | None = None
    published: set[int] = field(default_factory=set)

    @property
    def at_most_once(self) -> bool:
        return self.kind in ("simple", "channel")

    # -- publishing ------------------------------------------------------------------------

    async def publish(self, numbers: range) -> None:
        items = list(numbers)
        for start in range(0, len(items), 500):
            pipeline = self.redis.pipeline()
            for n in items[start : start + 500]:
                if self.kind in ("stream", "window", "atomic"):
                    pipeline.add("XADD", self.key, "*", "_payload", str(n))
                elif self.kind == "channel":
                    pipeline.add("PUBLISH", self.key, encode_frame(str(n).encode(), {}))
                else:
                    pipeline.add("RPUSH", self.key, encode_frame(str(n).encode(), {}))
            (await pipeline.execute()).raise_first()
            self.published.update(items[start : start + 500])

    async def steady(self, first: int) -> int:
        """Publish ``rate`` messages a second for ``seconds``, in twentieths of a second."""
        per_tick = max(1, math.ceil(self.size.rate / 20))
        ticks = max(1, int(self.size.seconds * 20))
        n = first
        for _ in range(ticks):
            await self.publish(range(n, n + per_tick))
            n += per_tick
            await trio.sleep(0.05)
        return n

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> Row:
        rng = random.Random(self.seed)
        runlog = self.directory / f"{self.name}.runs"
        procs = Consumers(
            self.kind, self.consumer_url, self.key, runlog, rng.randrange(1 << 30), self.consumers
        )
        faults: Counter[str] = Counter()
        try:
            if self.kind in ("stream", "window", "atomic"):
                await self.redis.execute("XGROUP", "CREATE", self.key, "g", "0", "MKSTREAM")
            await procs.start_all()
            done = trio.Event()
            n = 1
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._faults, procs, faults, rng, done)
                n = await self.steady(n)
                done.set()
            if self.heal is not None:
                await self.heal()
            if not self.at_most_once:
                await self.publish(range(n, n + self.size.backlog))
                n += self.size.backlog
                for _ in range(5):  # a consumer stopped five times while a backlog drains
                    await procs.stop(procs.names[0])
            await self._settle(runlog)
            await procs.stop_all()
        finally:
            procs.kill_all_now()
        faults.update(procs.faults)
        runs = Runs.read(runlog)
        pending = await self._pending(procs.names)
        effects = await self._effects() if self.kind in ("window", "atomic") else None
        return row_from(
            self.name,
            faults=faults,
            published=self.published,
            runs=runs,
            pending=pending,
            at_most_once=self.at_most_once,
            effects=effects,
            effects_must_be_once=self.kind == "atomic",
        )

    async def _faults(
        self, procs: Consumers, faults: Counter[str], rng: random.Random, done: trio.Event
    ) -> None:
        """Until ``done``: a fault every ``fault_every`` seconds on average, drawn by ``rng``."""
        kinds = ["SIGKILL", "SIGTERM"] + (["proxy"] * 3 if self.proxy_faults else [])
        heal: Callable[[], Awaitable[None]] | None = None
        while not done.is_set():
            with trio.move_on_after(rng.expovariate(1 / self.size.fault_every)):
                await done.wait()
            if heal is not None:
                await heal()
                heal = None
            if done.is_set():
                return
            kind = rng.choice(kinds)
            name = rng.choice(procs.names)
            if kind == "SIGKILL":
                await procs.kill(name)
            elif kind == "SIGTERM":
                await procs.stop(name)
            else:
                assert self.proxy_faults is not None
                label, heal = await self.proxy_faults(rng)
                faults[label] += 1

    async def _settle(self, runlog: Path) -> None:
        """Wait (bounded) until what the transport promises has happened: every message
        handled and nothing pending (at least once); the list emptied, or a last message
        seen (at most once). Returns when the time is up either way: the row tells."""
        with trio.move_on_after(SETTLE_WITHIN):
            if self.kind == "channel":
                marker = max(self.published) + 1
                while marker not in Runs.read(runlog).done:
                    await self.publish(range(marker, marker + 1))
                    await trio.sleep(0.1)
                self.published.discard(marker)
                return
            while True:
                if self.kind == "simple":
                    if await self.redis.execute("LLEN", self.key) == 0:
                        return
                elif self.published <= Runs.read(runlog).done and not await self._pending(
                    [f"c{i}" for i in range(self.consumers)]
                ):
                    return
                await trio.sleep(0.1)

    # -- what the server holds -------------------------------------------------------------

    async def _numbers(self, key: str) -> set[int]:
        if self.kind in ("stream", "window", "atomic"):
            reply = await self.redis.execute("XRANGE", key, "-", "+")
            return {int(_fields(f)[b"_payload"]) for _, f in reply}
        from trio_streams.redis.frames import decode_frame

        values = await self.redis.execute("LRANGE", key, 0, -1)
        return {int(decode_frame(bytes(v))[0]) for v in values}

    async def _pending(self, names: list[str]) -> set[int]:
        """Published messages the transport still holds unsettled."""
        if self.kind == "channel":
            return set()
        if self.kind in ("reliable", "simple"):
            out = await self._numbers(self.key)
            for name in names:
                out |= await self._numbers(processing_key(self.key, name))
            return out
        last = "0-0"
        for group in await self.redis.execute("XINFO", "GROUPS", self.key) or ():
            info = _fields(group)
            if info[b"name"] == b"g":
                last = info[b"last-delivered-id"].decode()
        out = {
            int(_fields(f)[b"_payload"])
            for _, f in await self.redis.execute("XRANGE", self.key, f"({last}", "+")
        }
        for entry_id, *_ in await self.redis.execute(
            "XPENDING", self.key, "g", "-", "+", 1_000_000
        ):
            for _, f in await self.redis.execute("XRANGE", self.key, entry_id, entry_id):
                out.add(int(_fields(f)[b"_payload"]))
        return out

    async def _effects(self) -> dict[int, int]:
        reply = await self.redis.execute("HGETALL", effects_key(self.key))
        pairs = _fields(reply)
        return {int(k): int(v) for k, v in pairs.items()}


def _fields(reply: Any) -> dict[bytes, Any]:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))
