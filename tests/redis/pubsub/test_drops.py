"""A slow Pub/Sub subscriber that the server drops at its output-buffer limit, on a real server:
the drop is found while the handlers are busy, the gap is measured from it, health is degraded
while it lasts, and what was received before the drop is still delivered."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from trio_streams import App, AppFailed, Health, HealthState
from trio_streams.redis import RedisBroker, RedisChannel
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.pubsub import PubSubFailed

from .support import Served, serving_with_faults, subscribers_of

#: Probe every 50 ms, reconnect fast: a drop is found within 0.1 s.
_QUICK = "?health_check_interval=0.05&backoff_initial=0.01&backoff_cap=0.1"
#: The number the last message carries, published once the subscription is back.
_LAST = 99_999_999
_PAD = b"x" * 4000


def _numbered(n: int) -> bytes:
    return encode_frame(b"%08d" % n + _PAD, {})


async def _publish_until_dropped(redis: RedisClient) -> tuple[int, float]:
    """Publish numbered messages until the server has dropped the only subscriber (PUBLISH
    then counts no receiver); the last number a subscriber was there for, and when the drop
    was seen (Trio clock: the drop happened before)."""
    n = 0
    while await redis.execute("PUBLISH", "news", _numbered(n)) == 1:
        n += 1
        assert n < 100_000, "the server never dropped the subscriber"
    return n - 1, trio.current_time()


async def test_a_slow_subscriber_dropped_by_the_server_is_found_degraded_and_resubscribed_at_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("CONFIG", "SET", "client-output-buffer-limit", "pubsub 64kb 32kb 60")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    release = trio.Event()
    last = trio.Event()
    seen: list[int] = []
    #: The app's health as each message reaches the handler.
    health_when_handled: list[Health] = []
    #: The app being served, once it is.
    serving: list[Served] = []

    @broker.subscriber(RedisChannel("news"), name="news")
    async def handle(payload: bytes) -> None:
        await release.wait()  # a handler far slower than the publisher
        health_when_handled.append(serving[0].running.health.value)
        seen.append(int(payload[:8]))
        if seen[-1] == _LAST:
            last.set()

    # A loss is dated from when the connection was last known alive, which may be the
    # subscription's own confirmation: the bound is taken before the app subscribes.
    subscribed_at = trio.current_time()
    async with serving_with_faults(app) as served:
        serving.append(served)
        await subscribers_of(redis, "news", 1)
        heard_up_to, dropped_by = await _publish_until_dropped(redis)

        async def gap_reported() -> bool:
            await trio.lowlevel.checkpoint()
            return any(f.kind == "gap" for f in served.faults)

        # Found while the handler still holds the first message: degraded, then subscribed
        # again at once.
        await eventually(gap_reported, within=10, what="the drop found and the gap reported")
        await subscribers_of(redis, "news", 1)
        assert not release.is_set() and seen == []

        source = served.source("news")
        gap = source.last_gap
        assert gap is not None and source.gaps == 1
        # Measured from the drop (no later than it), not from when the reader reached it.
        assert subscribed_at <= gap.lost_at <= dropped_by < gap.resumed_at
        assert source.missed_seconds == gap.resumed_at - gap.lost_at
        # Degraded from the drop on, without a break: ``behind`` is raised before
        # ``connection`` clears, and lasts while the backlog waits for the handler.
        changes = served.changes
        assert [(kind, cleared) for kind, cleared, _ in changes] == [
            ("connection", False),
            ("gap", False),
            ("behind", False),
            ("gap", True),
            ("connection", True),
        ]
        assert changes[2][2] == {"connection", "gap", "behind"}
        assert changes[4][2] == {"behind"}
        health = served.running.health.value
        assert health.state is HealthState.DEGRADED
        assert "behind" in str(health) and "news" in str(health)

        assert await redis.execute("PUBLISH", "news", _numbered(_LAST)) == 1
        release.set()
        with trio.fail_after(30):
            await last.wait()
        # The fault clears once delivery reaches the gap, and only then.
        assert [(kind, cleared) for kind, cleared, _ in changes[5:]] == [("behind", True)]
        assert changes[5][2] == set()
    # What was received before the drop is delivered, in order, before the new connection's.
    assert len(seen) > 1 and seen[-1] == _LAST
    assert seen[:-1] == list(range(len(seen) - 1)) and seen[-2] <= heard_up_to
    # The backlog is handled while degraded, the new connection's message once running again.
    states = [h.state for h in health_when_handled]
    assert states[0] is HealthState.DEGRADED and states[-1] is HealthState.RUNNING
    first_running = states.index(HealthState.RUNNING)
    assert set(states[first_running:]) == {HealthState.RUNNING}


async def test_a_busy_subscriber_the_server_cut_off_that_may_not_subscribe_again_fails_naming_why(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    rules = ("on", ">pw", "~*", "resetchannels", "&news", "+@all")
    await redis.execute("ACL", "SETUSER", "app", *rules)
    app = App("svc")
    url = f"redis://app:pw@{redis_server.host}:{redis_server.port}{_QUICK}"
    broker = app.broker(RedisBroker(url))
    handling = trio.Event()

    @broker.subscriber(RedisChannel("news"), name="news")
    async def handle(payload: bytes) -> None:
        handling.set()
        await trio.sleep_forever()  # stuck: the connection is never read to its end

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await subscribers_of(redis, "news", 1)
            for n in range(200):  # far more than one read takes
                await redis.execute("PUBLISH", "news", _numbered(n))
            await handling.wait()
            # The server closes the connections subscribed to what the user may no longer use.
            await redis.execute("ACL", "SETUSER", "app", "resetchannels")
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, PubSubFailed)
    assert "news: subscribing again to channel 'news'" in str(error.__cause__)
    assert "NoPermissionError" in str(error.__cause__)
