"""Recording and ``top`` on a Redis Cluster: streams on several nodes."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.redis_servers import RedisClusterServers
from trio_streams.file.writer import StreamWriter
from trio_streams.record import record_stream, replay_file
from trio_streams.redis.client import connect, key_slot
from trio_streams.top import redis_rows, sample_redis
from trio_streams.top.redis_sample import find_streams

from .support import add_entries, raw_entries


async def test_a_stream_on_a_cluster_records_and_replays_and_top_finds_streams_on_every_node(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    prefix = f"rec{secrets.token_hex(4)}"
    keys = [f"{prefix}.a", f"{prefix}.b", f"{prefix}.c", f"{prefix}.d"]
    nodes = {id(redis_cluster.node_for_slot(key_slot(key))) for key in keys}
    assert len(nodes) > 1  # the streams live on more than one primary
    async with connect(redis_cluster.url) as redis:
        for n, key in enumerate(keys):
            await add_entries(redis, key, n + 1)
        with StreamWriter(tmp_path / "r.ss") as writer:
            await record_stream(redis, keys[3], writer)
        await replay_file(tmp_path / "r.ss", redis, rename=f"{prefix}.copy")
        original = await raw_entries(redis, keys[3])
        copied = await raw_entries(redis, f"{prefix}.copy")
        assert [f for _, f in copied] == [f for _, f in original]
        found = await find_streams(redis, f"{prefix}.*")
        assert found == sorted([*keys, f"{prefix}.copy"])
        rows = redis_rows(await sample_redis(redis, found, now=0.0), None)
        lengths = {row.key: row.length for row in rows}
        assert lengths == {**{key: n + 1 for n, key in enumerate(keys)}, f"{prefix}.copy": 4}
