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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key
from trio_streams.testing.faults import (
    FAULT_KINDS,
    FaultKind,
    FaultProxy,
    FaultSchedule,
    KillPoint,
    Ledger,
)

from .consumer import effects_key
from .history import Row, row_from
from .procs import Consumers

#: The proxy's faults the schedule mixes: every kind there is.
PROXY_FAULTS: tuple[FaultKind, ...] = FAULT_KINDS

#: Seconds a workload waits for its messages to settle once faults are healed.
SETTLE_WITHIN = 90.0


@dataclass(frozen=True)
class Size:
    """How big one workload is: seconds of steady publishing, messages a second, the backlog
    published at once, and the mean pause between two faults."""

    seconds: float
    rate: int
    backlog: int
    fault_every: float
    #: How many times one consumer is stopped (and restarted) while the backlog drains.
    backlog_stops: int = 5

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
    #: The proxy the consumers reach the server through (``consumer_url`` is its URL), whose
    #: seeded schedule of faults runs while messages are published.
    proxy: FaultProxy | None = None
    published: set[int] = field(default_factory=set)
    ledger: Ledger = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.directory / f"{self.key}.ledger")

    @property
    def process_faults(self) -> tuple[str, ...]:
        """What the process faults draw from: a kill anywhere, a graceful stop, and kills at
        the kit's exact points — inside a handler, and (where acknowledgements wait in a
        pipeline window: a group, a reliable list) between a settle and its flush."""
        kinds: tuple[str, ...] = ("SIGKILL", "SIGTERM", "inside_handler")
        if self.kind in ("stream", "window", "atomic", "reliable"):
            kinds += ("between_settle_and_flush",)
        return kinds

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
            for n in items[start : start + 500]:
                self.ledger.published(n)
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
        procs = Consumers(
            self.kind,
            self.consumer_url,
            self.key,
            self.ledger.path,
            rng.randrange(1 << 30),
            self.consumers,
        )
        faults: Counter[str] = Counter()
        try:
            if self.kind in ("stream", "window", "atomic"):
                await self.redis.execute("XGROUP", "CREATE", self.key, "g", "0", "MKSTREAM")
            await procs.start_all()
            n = 1
            async with trio.open_nursery() as nursery:
                if self.proxy is not None:
                    schedule = FaultSchedule(
                        seed=rng.randrange(1 << 30),
                        every=self.size.fault_every,
                        duration=self.size.seconds,
                        kinds=PROXY_FAULTS,
                    )
                    nursery.start_soon(self.proxy.run_schedule, schedule)
                nursery.start_soon(self._process_faults, procs, rng, nursery.cancel_scope)
                n = await self.steady(n)
                nursery.cancel_scope.cancel()
            if self.proxy is not None:
                self.proxy.heal()
                faults.update(step.kind for step in self.proxy.applied)
            if not self.at_most_once:
                await self.publish(range(n, n + self.size.backlog))
                n += self.size.backlog
                for _ in range(self.size.backlog_stops):  # stopped again and again mid-backlog
                    await procs.stop(procs.names[0])
            await self._settle(procs.names)
            await procs.stop_all()
        finally:
            procs.kill_all_now()
        faults.update(procs.faults)
        pending = await self._pending(procs.names)
        counts_effects = self.kind in ("window", "atomic")
        effects = await self._effects() if counts_effects else None
        report = self.ledger.check(pending=pending, effects=effects, at_most_once=self.at_most_once)
        return row_from(
            self.name,
            report,
            faults=faults,
            at_most_once=self.at_most_once,
            counts_effects=counts_effects,
            effects_must_be_once=self.kind == "atomic",
            effects=effects,
        )

    async def _process_faults(
        self, procs: Consumers, rng: random.Random, scope: trio.CancelScope
    ) -> None:
        """Until cancelled: a consumer killed or stopped (and restarted) every
        ``fault_every`` seconds on average, which one and how (:attr:`process_faults`) drawn
        by ``rng``. A fault under
        way when publishing ends is finished first (shielded), so no consumer is left down."""
        while True:
            await trio.sleep(rng.expovariate(1 / self.size.fault_every))
            name = rng.choice(procs.names)
            how = rng.choice(self.process_faults)
            with trio.CancelScope(shield=True):
                if how == "SIGKILL":
                    await procs.kill(name)
                elif how == "SIGTERM":
                    await procs.stop(name)
                else:
                    await procs.kill_at(name, KillPoint(how, rng.randint(1, 10)))

    async def _settle(self, names: list[str]) -> None:
        """Wait (bounded) until what the transport promises has happened: every message
        handled and nothing pending (at least once); the list emptied, or a last message
        seen (at most once). Returns when the time is up either way: the row tells."""
        with trio.move_on_after(SETTLE_WITHIN):
            if self.kind == "channel":
                # A new message every tenth of a second until one is handled: the subscriber is
                # back and everything published before it was delivered or dropped.
                first = max(self.published) + 1
                markers: set[int | str] = set()
                while not self.ledger.check().handled & markers:
                    marker = first + len(markers)
                    await self.publish(range(marker, marker + 1))
                    markers.add(marker)
                    await trio.sleep(0.1)
                return
            while True:
                if self.kind == "simple":
                    if await self.redis.execute("LLEN", self.key) == 0:
                        return
                elif self.published <= self.ledger.check().handled and not await self._pending(
                    names
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

    async def _effects(self) -> dict[int | str, int]:
        reply = await self.redis.execute("HGETALL", effects_key(self.key))
        pairs = _fields(reply)
        return {int(k): int(v) for k, v in pairs.items()}


def _fields(reply: Any) -> dict[bytes, Any]:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))
