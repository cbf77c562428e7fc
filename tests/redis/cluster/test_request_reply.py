"""Request-reply on a 3-primary cluster: the request goes to the node of its stream's slot, the
reply is a classic ``PUBLISH``, which the cluster bus carries to the node the caller's reply
channel is subscribed on, wherever that is."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.support import serving
from trio_streams import App, Destination
from trio_streams.core.replies import REPLY_TO_HEADER
from trio_streams.redis import RedisBroker, RedisChannel, RedisStream
from trio_streams.redis.client import key_slot
from trio_streams.redis.wire import decode_fields

STEP = 15


@dataclass
class Order:
    item: str
    count: int


def key_on_another_node(cluster: RedisClusterServers, prefix: str) -> tuple[str, RedisServer]:
    """A fresh key whose slot a primary other than slot 0's owns, and that primary."""
    first = cluster.node_for_slot(0)
    while True:
        key = f"{prefix}-{secrets.token_hex(4)}"
        node = cluster.node_for_slot(key_slot(key))
        if node is not first:
            return key, node


def subscribers(server: RedisServer, channel: str) -> int:
    return int(server.command("PUBSUB", "NUMSUB", channel)[1])


async def test_a_request_to_a_stream_on_another_shard_than_slot_0s_is_answered_over_the_channel(
    redis_cluster: RedisClusterServers,
) -> None:
    key, node = key_on_another_node(redis_cluster, "rr-quotes")
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_cluster.url))

    @broker.subscriber(RedisStream(key, group="pricing"), block=50)
    async def quote(order: Order) -> float:
        return 2.5 * order.count

    async with serving(app), RedisBroker(redis_cluster.url) as caller:
        with trio.fail_after(STEP):
            for n in range(1, 4):
                assert await caller.request(Order("tea", n), key, reply_type=float) == 2.5 * n
        [(_, headers), *_] = [decode_fields(f) for _, f in node.command("XRANGE", key, "-", "+")]
        reply_to = headers[REPLY_TO_HEADER]
        # The reply channel is subscribed on another node than the stream's: the replies the
        # responder published crossed the cluster bus to reach it.
        listening = [s for s in redis_cluster.primaries if subscribers(s, reply_to)]
        assert len(listening) == 1 and listening[0] is not node
        assert caller.late_replies == 0


async def test_a_request_to_a_channel_whose_subscriber_is_on_another_node_is_answered(
    redis_cluster: RedisClusterServers,
) -> None:
    # A classic PUBLISH counts the receivers of the node that took it only: the responder
    # here listens on another node, so the count is 0, and still it receives the request.
    channel = f"rr-prices-{secrets.token_hex(4)}"
    publishing_node = redis_cluster.node_for_slot(0)  # where a cluster client sends PUBLISH
    other = next(s for s in redis_cluster.primaries if s is not publishing_node)
    app = App("pricing")
    broker = app.broker(RedisBroker(other.url))  # a client of that one node

    @broker.subscriber(RedisChannel(channel))
    async def quote(order: Order) -> float:
        return 2.5 * order.count

    async with serving(app), RedisBroker(redis_cluster.url) as caller:

        async def subscribed() -> bool:
            await trio.lowlevel.checkpoint()
            return subscribers(other, channel) == 1

        await eventually(subscribed, within=STEP, what="the responder subscribed")
        assert subscribers(publishing_node, channel) == 0
        with trio.fail_after(STEP):
            reply = await caller.request(Order("tea", 2), Destination.channel(channel))
        assert reply.decode(float) == 5.0
