"""A recording that loses its server while following: it reports it, reconnects and misses
nothing the stream kept."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.redis.client.redis_waits import wait_until_blocked
from tests.redis_servers import redis_server
from trio_streams.file.writer import StreamWriter
from trio_streams.record import record_stream
from trio_streams.redis.client import connect
from trio_streams.top import sample_redis

from .support import recorded


async def test_a_restart_while_following_is_reported_and_the_recording_resumes_after_the_last_id(
    tmp_path: Path,
) -> None:
    # AOF on, fsync always: the restarted server still has the stream and its last id.
    with redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        async with connect(server.url) as redis:
            await redis.execute("XADD", "orders", "1-0", "_payload", b"before")
            faults: list[str] = []
            with StreamWriter(tmp_path / "r.ss") as writer:
                async with trio.open_nursery() as nursery:

                    async def follow() -> None:
                        await record_stream(
                            redis, "orders", writer, follow=True, limit=3,
                            on_fault=faults.append, block_ms=50,
                        )  # fmt: skip

                    nursery.start_soon(follow)
                    with trio.fail_after(30):
                        await wait_until_blocked(redis, "xread")
                        await trio.to_thread.run_sync(server.restart)
                        # Written while the recording is away or reconnecting: not missed.
                        await redis.execute("XADD", "orders", "2-0", "_payload", b"during")
                        await redis.execute("XADD", "orders", "3-0", "_payload", b"after")
    assert [m[3] for m in recorded(tmp_path / "r.ss")] == [b"before", b"during", b"after"]
    assert faults and "connection lost while following 'orders'" in faults[0]


async def test_a_stream_gone_between_scan_and_snapshot_is_left_out() -> None:
    with redis_server() as server:
        async with connect(server.url) as redis:
            await redis.execute("XADD", "here", "*", "_payload", b"x")
            await redis.execute("SET", "now-a-string", "x")
            snapshot = await sample_redis(redis, ["here", "gone", "now-a-string"], now=0.0)
    assert list(snapshot.streams) == ["here"]
