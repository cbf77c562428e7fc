"""The pipeline window under SIGKILL: a consumer process of a group with ``pipeline=True``
(with and without ``atomic=True``; COUNT 20, every other setting at its default) is killed ten
times while it consumes 3000 entries, restarted each time under the same consumer name (so it
takes back its own pending entries first), and finally drained by one stopped gracefully.

Each handler queues ``SADD applied <n>`` and ``INCR count:<n>`` for its entry ``n`` (and a 64 KiB
``SET pad``, so a flush reaches the server in several pieces) and acks. Odd kills land at a
random point of the read's cycle (mostly between flushes); even kills land inside a flush: once
the server holds part of one (with ``atomic``, a segment's MULTI without its EXEC; without, a
pipeline partly run). After each kill, once the server has closed the dead process's
connections, one MULTI/EXEC reads the counts, the pending list and the group's last-delivered
id: a consistent picture of what the killed process left. What the checks prove:

- ``atomic=True``: at every kill, every entry is either acknowledged with its side effects
  applied once, or unacknowledged with none applied; at the end every entry is applied exactly
  once and the pending list is empty.
- ``pipeline=True`` alone: an acknowledged entry always has its side effects (they travel before
  the XACK); a kill inside a flush leaves side effects applied without their ack, and those
  entries are delivered and applied again: at the end every entry is applied at least once, the
  pending list is empty, and every extra application is accounted for by a kill that left the
  entry applied but unacknowledged.
- Both: no process applies an entry twice, nor applies one after its ack.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from tests.redis.client.redis_waits import blocked_clients, eventually
from tests.redis.streams.procs import Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .window_app import COUNT

ENTRIES = 3000
KILLS = 10
#: The consumer's connections carry this name, so the test can see them go.
CLIENT_NAME = "window-consumer"
APP = "tests.redis.window.window_app"


@dataclass(frozen=True)
class Picture:
    """What the server holds at one moment (read in one MULTI/EXEC)."""

    counts: list[int]  # ``count:<n>`` at index n (index 0 unused)
    applied: set[int]  # members of ``applied``
    pending: set[int]  # entries in the group's pending list
    delivered: set[int]  # entries at or before the group's last-delivered id

    def acked(self, n: int) -> bool:
        return n in self.delivered and n not in self.pending


def _id(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, seq = text.split("-")
    return int(ms), int(seq)


def _group_field(info: Any, field: str) -> Any:
    groups = info if isinstance(info, list) else [info]
    (group,) = groups
    if not isinstance(group, dict):
        group = dict(zip(group[::2], group[1::2], strict=True))
    found = {(k.decode() if isinstance(k, bytes) else k): v for k, v in group.items()}
    return found[field]


async def prefill(redis: RedisClient) -> dict[tuple[int, int], int]:
    """The group (at the start of the stream) and ``ENTRIES`` entries, payloads 1..N; returns
    each entry's id to its payload."""
    await redis.execute("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
    ids: dict[tuple[int, int], int] = {}
    for first in range(1, ENTRIES + 1, 500):
        pipeline = redis.pipeline()
        numbers = range(first, min(first + 500, ENTRIES + 1))
        for n in numbers:
            pipeline.add("XADD", "s", "*", "_payload", str(n))
        replies = (await pipeline.execute()).raise_first()
        ids.update((_id(reply), n) for reply, n in zip(replies, numbers, strict=True))
    return ids


async def picture(redis: RedisClient, ids: dict[tuple[int, int], int]) -> Picture:
    counts, applied, pending, info = await (
        redis.transaction()
        .add("MGET", *(f"count:{n}" for n in range(1, ENTRIES + 1)))
        .add("SMEMBERS", "applied")
        .add("XPENDING", "s", "g", "-", "+", ENTRIES + 1)
        .add("XINFO", "GROUPS", "s")
        .execute()
    )
    last = _id(_group_field(info, "last-delivered-id"))
    return Picture(
        counts=[0, *(0 if c is None else int(c) for c in counts)],
        applied={int(m) for m in applied},
        pending={ids[_id(row[0])] for row in pending},
        delivered={n for entry_id, n in ids.items() if entry_id <= last},
    )


async def consumer_gone(redis: RedisClient) -> None:
    """Wait until the server has closed every connection of the killed process, so all it had
    received from it has run (or been dropped) before the picture is taken."""

    async def gone() -> bool:
        listing = (await redis.execute("CLIENT", "LIST")).decode()
        return f"name={CLIENT_NAME} " not in listing

    await eventually(gone, within=10, what="the killed consumer's connections to close")


async def inside_flush(redis: RedisClient, *, atomic: bool) -> None:
    """Wait until the server holds part of a flush of the consumer's: with ``atomic``, a
    connection of it inside MULTI (a segment's transaction half received); without, one with a
    command half received (a pipeline partly run). A kill now lands inside the flush."""

    async def caught() -> bool:
        listing = (await redis.execute("CLIENT", "LIST")).decode()
        for line in listing.splitlines():
            fields = dict(part.split("=", 1) for part in line.split(" ") if "=" in part)
            half = int(fields["multi"]) >= 0 if atomic else int(fields["qbuf"]) > 0
            if fields.get("name") == CLIENT_NAME and half:
                return True
        return False

    with trio.fail_after(10):
        while not await caught():
            pass  # each look is a round trip to the server (a checkpoint), bounded above


async def applied_at_least(redis: RedisClient, target: int) -> None:
    async def reached() -> bool:
        return bool(await redis.execute("SCARD", "applied") >= target)

    await eventually(reached, within=30, what=f"{target} entries applied")


def check_step(
    atomic: bool, before: Picture, after: Picture, when: str, *, final: bool = False
) -> list[str]:
    """What is wrong between two pictures, one line per entry (empty: nothing)."""
    wrong: list[str] = []
    for n in range(1, ENTRIES + 1):
        step = after.counts[n] - before.counts[n]
        acked = after.acked(n)
        state = f"entry {n} {when}: count {after.counts[n]} (+{step}), acked {acked}"
        if not 0 <= step <= 1:
            wrong.append(f"{state}: applied more than once by one process")
        if before.acked(n) and step:
            wrong.append(f"{state}: applied again after its ack")
        if acked and after.counts[n] < 1:
            wrong.append(f"{state}: acknowledged without its side effects")
        if (atomic or final) and (after.counts[n] >= 1) != (n in after.applied):
            # (without atomic, a kill may fall between the two; the entry is applied again)
            wrong.append(f"{state}: SADD and INCR of one segment disagree")
        if atomic and after.counts[n] != int(acked):
            wrong.append(f"{state}: side effects and ack not applied together")
    return wrong


@dataclass(frozen=True)
class Run:
    """What a run showed, once every check passed."""

    #: Applications a kill left without their ack (summed over the entries).
    unacked: int
    #: Kills that left at least one application without its ack.
    kills_with_unacked: int
    #: Entries applied more than once.
    doubled: int
    seconds: float


async def kill_repeatedly_then_drain(
    redis_server: RedisServer, redis: RedisClient, *, atomic: bool, seed: int
) -> Run:
    """The scenario of the module docstring; every check but the mode's last ones."""
    started = time.monotonic()
    ids = await prefill(redis)
    url = f"{redis_server.url}/?client_name={CLIENT_NAME}"
    mode = "atomic" if atomic else "plain"
    rng = random.Random(seed)
    previous = await picture(redis, ids)
    #: Per entry: kills that left it applied (in that process) but unacknowledged.
    unacked = [0] * (ENTRIES + 1)
    kills_with_unacked = 0
    wrong: list[str] = []
    for kill in range(1, KILLS + 1):
        consumer = Consumer(url, "s", "g", "c1", mode, module=APP)
        try:
            await applied_at_least(redis, len(previous.applied) + rng.randint(COUNT, 6 * COUNT))
            if kill % 2:
                # Where in the read's cycle (handling, flushing, reading) the kill lands: a
                # random point, not a synchronisation.
                await trio.sleep(rng.uniform(0, 0.03))
            else:
                await inside_flush(redis, atomic=atomic)
        finally:
            consumer.kill()
        await consumer_gone(redis)
        now = await picture(redis, ids)
        wrong += check_step(atomic, previous, now, f"at kill {kill}")
        left = [n for n in range(1, ENTRIES + 1) if now.counts[n] > previous.counts[n]]
        left = [n for n in left if n in now.pending]
        for n in left:
            unacked[n] += 1
        kills_with_unacked += bool(left)
        previous = now
    last = max(ids)
    drainer = Consumer(url, "s", "g", "c1", mode, module=APP)
    try:

        async def drained() -> bool:
            """Every entry delivered, none pending, and the consumer waiting for new ones."""
            waiting = await blocked_clients(redis, "xreadgroup")
            summary = await redis.execute("XPENDING", "s", "g")
            info = await redis.execute("XINFO", "GROUPS", "s")
            return (
                any(f"name={CLIENT_NAME} " in line for line in waiting)
                and int(summary[0]) == 0
                and _id(_group_field(info, "last-delivered-id")) == last
            )

        await eventually(drained, within=30, what="every entry delivered and acknowledged")
    finally:
        drainer.stop()
    assert drainer.process.returncode == 0
    final = await picture(redis, ids)
    wrong += check_step(atomic, previous, final, "after the drain", final=True)
    for n in range(1, ENTRIES + 1):
        if not final.acked(n):
            wrong.append(f"entry {n} was never acknowledged")
        if final.counts[n] != 1 + unacked[n]:
            wrong.append(
                f"entry {n}: applied {final.counts[n]} times, but kills left it applied "
                f"without its ack {unacked[n]} times"
            )
    assert not wrong, f"{len(wrong)} problems, the first: " + "; ".join(wrong[:10])
    return Run(
        unacked=sum(unacked),
        kills_with_unacked=kills_with_unacked,
        doubled=sum(1 for n in range(1, ENTRIES + 1) if final.counts[n] > 1),
        seconds=round(time.monotonic() - started, 1),
    )


@pytest.mark.slow
async def test_atomic_window_killed_between_and_inside_flushes_applies_each_entrys_side_effects_and_ack_together_or_neither(  # noqa: E501
    redis_server: RedisServer, redis: RedisClient
) -> None:
    run = await kill_repeatedly_then_drain(redis_server, redis, atomic=True, seed=13)
    print(f"atomic: {ENTRIES} entries, {KILLS} kills, {run.doubled} applied twice, {run.seconds} s")
    assert (run.unacked, run.doubled) == (0, 0)


@pytest.mark.slow
async def test_window_without_atomic_killed_loses_no_side_effect_and_applies_again_only_what_a_kill_left_without_its_ack(  # noqa: E501
    redis_server: RedisServer, redis: RedisClient
) -> None:
    run = await kill_repeatedly_then_drain(redis_server, redis, atomic=False, seed=13)
    print(
        f"pipeline only: {ENTRIES} entries, {KILLS} kills, {run.kills_with_unacked} of them left "
        f"{run.unacked} applications without their ack; {run.doubled} entries applied twice or "
        f"more, {run.seconds} s"
    )
    # At-least-once: how often a kill inside a flush caught the server with part of the
    # pipeline run is up to timing, so it is reported, not required; every extra application
    # was checked above to come from such a kill.
    assert run.doubled <= run.unacked
