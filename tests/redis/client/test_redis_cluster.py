"""Cluster: slot map, hash tags, routing, MOVED/ASK, pipelines split per node, cross-slot
refusals, MULTI/EXEC pinned to one slot, sharded Pub/Sub."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from tests.redis_servers import RedisClusterServers
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import (
    CrossSlotError,
    Gap,
    Message,
    RedisCluster,
    RedisConnectionError,
    ReplyError,
    connect,
    key_slot,
)
from trio_streams.redis.client.cluster import parse_cluster_shards, parse_cluster_slots
from trio_streams.redis.client.keys import KeyFinder, parse_command_table

from .redis_waits import eventually, read_until_message

_prefixes = itertools.count()


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests sharing the cluster never collide."""
    return f"t{next(_prefixes)}"


@pytest.fixture
async def cluster(redis_cluster: RedisClusterServers) -> AsyncIterator[RedisCluster]:
    async with connect(redis_cluster.url) as client:
        assert isinstance(client, RedisCluster)
        yield client


async def key_on_other_node(cluster: RedisCluster, key: str, prefix: str) -> str:
    """A key whose slot another primary serves."""
    await cluster.refresh_slots()
    owner = cluster.node_for_slot(key_slot(key))
    for n in range(10_000):
        candidate = f"{prefix}:other:{n}"
        if cluster.node_for_slot(key_slot(candidate)) not in (owner, None):
            return candidate
    raise AssertionError("no key on another node")


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        ("123456789", 12739),
        ("foo", 12182),
        ("", 0),
        ("{user1000}.following", key_slot("user1000")),
        ("foo{}{bar}", key_slot("foo{}{bar}")),  # empty tag: the whole key
        ("foo{{bar}}zap", key_slot("{bar")),
        ("foo{bar}{zap}", key_slot("bar")),
        (b"\xff{\x00}", key_slot(b"\x00")),
    ],
)
def test_key_slot_with_hash_tags(key: str | bytes, slot: int) -> None:
    assert key_slot(key) == slot


async def test_key_slot_agrees_with_the_server(
    redis_cluster: RedisClusterServers, cluster: RedisCluster
) -> None:
    for key in ["a", "{a}b", "orders:{42}:items", "ключ", "x{}y"]:
        assert redis_cluster.primaries[0].command("CLUSTER", "KEYSLOT", key) == key_slot(key)
    await cluster.refresh_slots()
    # Replicas are in the shard map but never routed to.
    assert sorted(cluster.primaries) == sorted(s.address for s in redis_cluster.primaries)


async def test_slot_map_from_shards_matches_slots(redis_cluster: RedisClusterServers) -> None:
    node = redis_cluster.primaries[0]
    from_shards = parse_cluster_shards(node.command("CLUSTER", "SHARDS"), tls=False)
    from_slots = parse_cluster_slots(node.command("CLUSTER", "SLOTS"))
    assert sorted(from_shards) == sorted(from_slots)
    assert sum(last - first + 1 for first, last, _ in from_shards) == 16384


async def test_keys_are_found_from_the_servers_command_table(
    redis_cluster: RedisClusterServers,
) -> None:
    finder = KeyFinder(parse_command_table(redis_cluster.primaries[0].command("COMMAND")))
    assert finder.keys(("GET", "k")) == ["k"]
    assert finder.keys(("MSET", "a", 1, "b", 2)) == ["a", "b"]
    read = ("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "STREAMS", "s1", "s2", ">", ">")
    assert finder.keys(read) == ["s1", "s2"]
    assert finder.keys(("EVAL", "return 1", 2, "k1", "k2", "arg")) == ["k1", "k2"]
    assert finder.keys(("XINFO", "STREAM", "s")) == ["s"]
    assert finder.keys(("PING",)) == []
    assert finder.keys(("SORT", "k", "STORE", "d")) is None  # only the server can tell


#: Commands the Redis transport sends, in the forms it sends them, with keyword-placed keys,
#: and names that look like keywords (a group, a consumer or a key spelt ``streams``).
KEYWORD_COMMANDS: list[tuple[object, ...]] = [
    ("XREADGROUP", "GROUP", "streams", "streams", "COUNT", 1, "STREAMS", "k", ">"),
    ("XREADGROUP", "GROUP", "g", "streams", "STREAMS", "{t}a", "{t}b", ">", ">"),
    ("XREADGROUP", "GROUP", "streams", "c", "COUNT", 10, "BLOCK", 5, "NOACK", "STREAMS", "k", 0),
    ("XREADGROUP", "GROUP", "STREAMS", "STREAMS", "STREAMS", "streams", ">"),
    ("XREAD", "COUNT", 5, "BLOCK", 0, "STREAMS", "{t}a", "{t}b", 0, 0),
    ("XREAD", "STREAMS", "streams", "0-0"),
    ("XAUTOCLAIM", "k", "streams", "c", 1000, "0-0", "COUNT", 10),
    ("XAUTOCLAIM", "k", "g", "c", 0, "0-0", "COUNT", 10, "JUSTID"),
    ("XCLAIM", "k", "g", "streams", 0, "1-0", "2-0"),
    ("XPENDING", "k", "g"),
    ("XPENDING", "k", "g", "IDLE", 10, "-", "+", 10, "streams"),
    ("XINFO", "STREAM", "k"),
    ("XINFO", "STREAM", "k", "FULL", "COUNT", 5),
    ("XINFO", "GROUPS", "k"),
    ("XINFO", "CONSUMERS", "k", "streams"),
    ("XGROUP", "CREATE", "k", "streams", "$", "MKSTREAM"),
    ("XADD", "k", "MAXLEN", "~", 1000, "*", "_payload", "v"),
    ("XACK", "k", "g", "1-0", "2-0"),
    ("XRANGE", "k", "-", "+", "COUNT", 10),
    ("LMPOP", 2, "{t}a", "{t}b", "LEFT", "COUNT", 3),
    ("BLMPOP", 0, 1, "k", "RIGHT"),
    ("ZMPOP", 1, "z", "MIN", "COUNT", 2),
    ("BZMPOP", 1.5, 2, "{t}a", "{t}b", "MAX"),
    ("EVAL", "return 1", 2, "{t}a", "{t}b", "arg"),
    ("EVAL", "return 1", 0, "arg"),
    ("EVALSHA", "0" * 40, 1, "k", "arg"),
    ("EVAL_RO", "return 1", 1, "k"),
    ("FCALL", "f", 1, "k", "arg"),
    ("FCALL_RO", "f", 0),
    ("BLMOVE", "{t}a", "{t}b", "LEFT", "RIGHT", 0),
    ("LMOVE", "{t}a", "{t}b", "RIGHT", "LEFT"),
    ("ZUNIONSTORE", "{t}d", 2, "{t}a", "{t}b", "WEIGHTS", 1, 2),
    ("HGETALL", "h"),
    ("ZRANGE", "z", 0, -1, "WITHSCORES"),
    ("ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 10),
    ("ZPOPMIN", "z", 2),
    ("ZSCORE", "z", "m"),
]


@pytest.mark.parametrize("command", KEYWORD_COMMANDS, ids=lambda c: " ".join(map(str, c)))
async def test_keyword_placed_keys_are_found_as_the_server_finds_them(
    redis_cluster: RedisClusterServers, command: tuple[object, ...]
) -> None:
    node = redis_cluster.primaries[0]
    finder = KeyFinder(parse_command_table(node.command("COMMAND")))
    expected = [
        k if isinstance(k, bytes) else str(k).encode()
        for k in node.command("COMMAND", "GETKEYS", *command)
    ]
    found = finder.keys(command)  # type: ignore[arg-type]
    assert found is not None
    assert [str(k).encode() for k in found] == expected


async def test_xreadgroup_with_a_group_and_consumer_named_streams_routes_to_its_key(
    cluster: RedisCluster, prefix: str
) -> None:
    key = f"{prefix}:orders"
    await cluster.execute("XGROUP", "CREATE", key, "streams", "$", "MKSTREAM")
    entry = await cluster.execute("XADD", key, "*", "_payload", "p")
    reply = await cluster.execute(
        "XREADGROUP", "GROUP", "streams", "streams", "COUNT", 1, "STREAMS", key, ">"
    )
    entries = reply[key.encode()] if isinstance(reply, dict) else reply[0][1]
    assert [e[0] for e in entries] == [entry]
    assert await cluster.execute("XACK", key, "streams", entry) == 1


async def test_commands_route_to_their_slot(
    redis_cluster: RedisClusterServers, cluster: RedisCluster, prefix: str
) -> None:
    keys = [f"{prefix}:{n}" for n in range(30)]
    for n, key in enumerate(keys):
        await cluster.execute("SET", key, n)
    nodes = {cluster.node_for_slot(key_slot(k)) for k in keys}
    assert len(nodes) == 3  # the keys spread over every primary
    for n, key in enumerate(keys):
        assert await cluster.execute("GET", key) == str(n).encode()
        owner = redis_cluster.node_for_slot(key_slot(key))
        assert owner.command("GET", key) == str(n).encode()  # stored where it belongs


async def test_multi_key_command_across_slots_is_refused_before_sending(
    cluster: RedisCluster, prefix: str
) -> None:
    a, b = f"{prefix}:a", await key_on_other_node(cluster, f"{prefix}:a", prefix)
    with pytest.raises(CrossSlotError, match=r"command MSET .* different cluster slots"):
        await cluster.execute("MSET", a, 1, b, 2)
    assert await cluster.execute("EXISTS", a) == 0  # nothing was sent
    tagged = [f"{{{prefix}}}:a", f"{{{prefix}}}:b"]
    assert await cluster.execute("MSET", tagged[0], 1, tagged[1], 2) == b"OK"
    assert await cluster.execute("MGET", *tagged) == [b"1", b"2"]


async def test_pipeline_is_split_per_node_and_replies_keep_their_order(
    cluster: RedisCluster, prefix: str
) -> None:
    keys = [f"{prefix}:{n}" for n in range(60)]
    pipeline = cluster.pipeline()
    for n, key in enumerate(keys):
        pipeline.add("SET", key, n).add("INCR", key)
    pipeline.add("LPUSH", keys[0], "x")  # an error in place
    pipeline.add("PING")  # keyless: any node
    replies = await pipeline.execute()
    assert replies[:-2] == [r for n in range(60) for r in (b"OK", n + 1)]
    assert isinstance(replies[-2], ReplyError)
    assert replies[-1] == b"PONG"


async def test_transaction_is_pinned_to_one_slot(cluster: RedisCluster, prefix: str) -> None:
    tag = f"{{{prefix}}}"
    replies = await (
        cluster.transaction()
        .add("SET", f"{tag}:total", 10)
        .add("INCRBY", f"{tag}:total", 5)
        .add("XADD", f"{tag}:log", "*", "n", 1)
        .add("XLEN", f"{tag}:log")
        .execute()
    )
    assert replies[:2] == [b"OK", 15]
    assert replies[3] == 1
    other = await key_on_other_node(cluster, f"{tag}:total", prefix)
    with pytest.raises(CrossSlotError, match="transaction of 2 commands"):
        await cluster.transaction().add("INCR", f"{tag}:total").add("INCR", other).execute()
    assert await cluster.execute("GET", f"{tag}:total") == b"15"


async def test_moved_refreshes_the_map_and_the_command_succeeds(
    redis_cluster: RedisClusterServers, cluster: RedisCluster, prefix: str
) -> None:
    key = f"{prefix}:moving"
    slot = key_slot(key)
    await cluster.execute("SET", key, "v")
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.primaries if s is not source)
    await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)
    assert cluster.node_for_slot(slot) == source.address  # the client's map is now stale
    assert await cluster.execute("GET", key) == b"v"  # MOVED followed
    assert cluster.node_for_slot(slot) == target.address
    # A pipeline on a stale map: every redirected command still gets its own reply.
    await trio.to_thread.run_sync(redis_cluster.move_slot, slot, source)
    replies = (
        await cluster.pipeline().add("GET", key).add("SET", key, "w").add("GET", key).execute()
    )
    assert replies == [b"v", b"OK", b"w"]
    # A transaction whose slot moved is aborted whole by the server, then sent to the owner.
    await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)
    transaction = cluster.transaction().add("SET", key, "x").add("GET", key)
    assert await transaction.execute() == [b"OK", b"x"]


async def test_ask_during_a_migration_is_followed_once(
    redis_cluster: RedisClusterServers, cluster: RedisCluster, prefix: str
) -> None:
    tag = f"{{{prefix}:ask}}"
    moved_key, staying_key = f"{tag}:moved", f"{tag}:staying"
    slot = key_slot(moved_key)
    await cluster.execute("MSET", moved_key, "m", staying_key, "s")
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.primaries if s is not source)
    target_id = target.command("CLUSTER", "MYID")
    source_id = source.command("CLUSTER", "MYID")
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    source.command("MIGRATE", target.host, target.port, moved_key, 0, 5000)
    try:
        assert await cluster.execute("GET", moved_key) == b"m"  # ASK → ASKING + GET
        assert await cluster.execute("GET", staying_key) == b"s"  # still on the source
        assert cluster.node_for_slot(slot) == source.address  # ASK leaves the map alone
    finally:  # finish the migration either way
        await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)


async def test_sharded_pubsub_goes_to_the_channels_node(cluster: RedisCluster, prefix: str) -> None:
    channel = f"{{{prefix}}}:events"
    async with cluster.subscribe(shard_channels=[channel]) as subscription:
        assert subscription.connection is not None
        assert subscription.connection.address == cluster.node_for_slot(key_slot(channel))
        assert await cluster.execute("SPUBLISH", channel, "hello") == 1
        with trio.fail_after(5):
            assert await anext(subscription) == Message("smessage", channel.encode(), b"hello")
    with pytest.raises(ConfigurationError, match="separate subscriptions"):
        cluster.subscribe(["classic"], shard_channels=[channel])


async def test_classic_pubsub_reaches_subscribers_on_any_node(
    cluster: RedisCluster, prefix: str
) -> None:
    async with cluster.subscribe([f"{prefix}:news"]) as subscription:
        # Published through another node: the cluster bus forwards it.
        other = next(a for a in cluster.primaries if a != subscription.connection.address)  # type: ignore[union-attr]
        await cluster.execute_on(other, "PUBLISH", f"{prefix}:news", "hi")
        with trio.fail_after(5):
            assert await anext(subscription) == Message("message", f"{prefix}:news".encode(), b"hi")


async def test_dedicated_connection_goes_to_the_keys_node(
    cluster: RedisCluster, prefix: str
) -> None:
    key = f"{prefix}:stream"
    async with cluster.dedicated_connection(key) as connection:
        assert connection.address == cluster.node_for_slot(key_slot(key))
        await connection.execute("XADD", key, "*", "f", "v")
    async with cluster.connection(key) as connection:
        assert await connection.execute("XLEN", key) == 1


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[RedisClusterServers]:
    """A cluster this module may crash (the shared one stays whole for other tests)."""
    with RedisClusterServers(primaries=3) as servers:
        yield servers


async def test_node_crash_is_a_typed_error_and_the_restarted_node_serves_again(
    own_cluster: RedisClusterServers,
) -> None:
    async with connect(own_cluster.url, backoff_initial=0.01, backoff_cap=0.1) as client:
        assert isinstance(client, RedisCluster)
        key = "crash:key"
        await client.execute("SET", key, "v")
        victim = own_cluster.node_for_slot(key_slot(key))
        await trio.to_thread.run_sync(victim.kill)
        with pytest.raises(RedisConnectionError) as caught:
            await client.execute("GET", key)
        assert caught.value.address == victim.address
        # The other nodes keep serving keys of their own slots.
        elsewhere = next(
            f"crash:{n}" for n in range(1000)
            if client.node_for_slot(key_slot(f"crash:{n}")) != victim.address
        )  # fmt: skip
        assert await client.execute("SET", elsewhere, 1) == b"OK"
        # Restarted with its nodes.conf, the node rejoins with its slots (data is gone: no
        # persistence). The client reconnects on the next command; nothing was re-sent.
        mark = victim.log_mark()
        await trio.to_thread.run_sync(victim.start)
        await trio.to_thread.run_sync(
            lambda: victim.wait_for_log("Cluster state changed: ok", since=mark)
        )

        async def served() -> bool:
            try:
                return await client.execute("GET", key) is None
            except RedisConnectionError:
                return False

        await eventually(served, what="the restarted node to serve its slots")


async def test_pipeline_of_transaction_blocks_split_per_node(
    redis_cluster: RedisClusterServers, cluster: RedisCluster, prefix: str
) -> None:
    tags = [f"{{{prefix}:{n}}}" for n in range(12)]
    await cluster.refresh_slots()
    assert len({cluster.node_for_slot(key_slot(t[1:-1])) for t in tags}) > 1
    pipeline = cluster.pipeline()
    for tag in tags:  # each delivery's side effect and settle, atomic, one slot per block
        pipeline.add_transaction([("INCRBY", f"{tag}:total", 2), ("SET", f"{tag}:acked", 1)])
    pipeline.add("PING")
    replies = await pipeline.execute(raise_on_error=True)
    assert replies[:-1] == [[2, b"OK"]] * len(tags)
    # A block whose keys span slots is refused before anything of the pipeline is sent.
    other = await key_on_other_node(cluster, f"{tags[0]}:total", prefix)
    refused = cluster.pipeline().add("INCR", f"{tags[0]}:total")
    refused.add_transaction([("INCR", f"{tags[0]}:total"), ("INCR", other)])
    with pytest.raises(CrossSlotError):
        await refused.execute()
    assert await cluster.execute("GET", f"{tags[0]}:total") == b"2"
    # A block whose slot moved is aborted whole by the server and sent again to the owner.
    slot = key_slot(tags[1][1:-1])
    source = redis_cluster.node_for_slot(slot)
    target = next(s for s in redis_cluster.primaries if s is not source)
    await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)
    replies = await (
        cluster.pipeline()
        .add_transaction([("INCR", f"{tags[1]}:total"), ("GET", f"{tags[1]}:acked")])
        .execute()
    )
    assert replies == [[3, b"1"]]


async def test_shard_subscription_follows_its_slot_to_a_new_node(
    redis_cluster: RedisClusterServers, cluster: RedisCluster, prefix: str
) -> None:
    channel = f"{{{prefix}:moving}}:events"
    slot = key_slot(channel)
    async with cluster.subscribe(shard_channels=[channel]) as subscription:
        first = subscription.connection
        assert first is not None
        source = redis_cluster.node_for_slot(slot)
        target = next(s for s in redis_cluster.primaries if s is not source)
        items: list[Message | Gap] = []
        got_message = trio.Event()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_until_message, subscription, items, got_message)
            # The server drops shard subscriptions of a slot it hands over (sunsubscribe).
            await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)

            async def heard() -> bool:  # SPUBLISH counts the receivers on the owning node
                return bool(await cluster.execute("SPUBLISH", channel, "on the new node"))

            await eventually(heard, what="the shard subscription to move with its slot")
            with trio.fail_after(5):
                await got_message.wait()
        assert subscription.connection is not None
        assert subscription.connection.address == target.address
        gap, message = items
        assert isinstance(gap, Gap)
        assert message == Message("smessage", channel.encode(), b"on the new node")
