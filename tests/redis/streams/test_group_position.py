"""Moving a whole consumer group: ``broker.set_group_position``, ``trio-streams group
set-position`` and a group subscription's seek, on real servers (and under ``app.test()``)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.support import serving
from trio_streams import App, Context, Position, SeekRefused
from trio_streams.core.group_moves import GroupNotFound, PositionRefused
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.group_position import entries_read_supported
from trio_streams.redis.wire import stream_entries, text
from trio_streams.testing.faults import Ledger

from .support import pending_count


async def preload(redis: RedisClient, count: int, key: str = "s") -> None:
    for n in range(1, count + 1):
        await redis.execute("XADD", key, f"{n}-0", "_payload", str(n))


async def group_info(redis: RedisClient, key: str = "s", group: str = "g") -> dict[str, Any]:
    for raw in await redis.execute("XINFO", "GROUPS", key):
        fields = raw if isinstance(raw, dict) else dict(zip(raw[::2], raw[1::2], strict=True))
        info = {text(k): v for k, v in fields.items()}
        if text(info["name"]) == group:
            info["last-delivered-id"] = text(info["last-delivered-id"])
            return info
    raise AssertionError(f"no group {group!r}")


async def next_read(redis: RedisClient, consumer: str = "probe") -> list[str]:
    reply = await redis.execute(
        "XREADGROUP", "GROUP", "g", consumer, "COUNT", 100, "STREAMS", "s", ">"
    )
    return [text(entry_id) for entry_id, _ in stream_entries(reply, "s") or []]


# ---- "A group's position is shared, so it is a broker operation" --------------------------------


async def test_a_groups_position_is_shared_so_moving_it_is_a_broker_operation(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "$")  # at the tip: nothing to deliver
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    got = trio.Event()

    @broker.subscriber(RedisStream("s", group="g"), block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 10:
            got.set()

    # Outside a running app the broker opens a connection of its own.
    move = await broker.set_group_position("s", "g", Position.entry("4-0"))
    assert (move.was, move.now, move.replayed, move.first, move.last) == (
        "10-0",
        "3-" + str(2**64 - 1),
        7,
        "4-0",
        "10-0",
    )
    async with serving(app):
        with trio.fail_after(10):
            await got.wait()
    assert seen == [4, 5, 6, 7, 8, 9, 10]


# ---- "(beginning, end, an entry id, a timestamp: XGROUP SETID with ENTRIESREAD where supported)"


@pytest.mark.parametrize(
    ("position", "delivered_next", "lag"),
    [
        (Position.beginning(), "1-0", 10),
        (Position.end(), None, 0),
        (Position.entry("4-0"), "4-0", 7),  # the entry itself is delivered next
        (Position.entry("4-5"), "5-0", 6),  # an id between entries: the next one
        (Position.timestamp(6), "7-0", 4),  # the first entry strictly later
    ],
    ids=["beginning", "end", "entry", "entry-between", "timestamp"],
)
async def test_beginning_end_an_entry_id_and_a_timestamp_set_the_group_with_entries_read(
    redis: RedisClient,
    redis_server: RedisServer,
    position: Position,
    delivered_next: str | None,
    lag: int,
) -> None:
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "5-0")
    assert await entries_read_supported(redis)  # asked of the server (COMMAND DOCS)
    move = await RedisBroker(redis_server.url).set_group_position("s", "g", position)
    info = await group_info(redis)
    assert info["lag"] == lag  # ENTRIESREAD keeps the lag right
    assert info["entries-read"] == 10 - lag == move.entries_read
    assert info["last-delivered-id"] == move.now
    read = await next_read(redis)
    assert (read[0] if read else None) == delivered_next
    assert len(read) == lag


async def test_a_deleted_entry_after_the_position_counts_as_read_so_the_lag_ends_at_zero(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XDEL", "s", "8-0")
    await RedisBroker(redis_server.url).set_group_position("s", "g", Position.entry("6-0"))
    info = await group_info(redis)
    # Ten added, four left after the position (6, 7, 9, 10): the deleted one counts as read.
    # Redis itself reports no lag while a deleted entry lies ahead of the group.
    assert (info["entries-read"], info["lag"]) == (6, None)
    assert await next_read(redis) == ["6-0", "7-0", "9-0", "10-0"]
    assert (await group_info(redis))["lag"] == 0


async def test_a_sequence_number_a_future_entry_and_a_missing_stream_or_group_are_typed_errors(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await preload(redis, 3)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    broker = RedisBroker(redis_server.url)
    with pytest.raises(PositionRefused, match=r"Position.sequence\(2\) cannot address a Redis"):
        await broker.set_group_position("s", "g", Position.sequence(2))
    with pytest.raises(PositionRefused, match=r"entry 9-0 is past the last id stream 's' gave out"):
        await broker.set_group_position("s", "g", Position.entry("9-0"))
    with pytest.raises(PositionRefused, match=r"has written no entry later than 3 ms"):
        await broker.set_group_position("s", "g", Position.timestamp(3))
    with pytest.raises(PositionRefused, match=r"names stream 'other'"):
        await broker.set_group_position("s", "g", Position.entry("1-0", stream="other"))
    with pytest.raises(
        GroupNotFound, match=r"stream 's' has no consumer group 'nope' \(its groups: 'g'\)"
    ):
        await broker.set_group_position("s", "nope", Position.end())
    with pytest.raises(
        GroupNotFound, match=r"stream 'gone' does not exist, so it has no consumer group 'g'"
    ):
        await broker.set_group_position("gone", "g", Position.end())
    assert (await group_info(redis))["last-delivered-id"] == "0-0"  # nothing moved


async def test_a_position_is_refused_only_past_the_last_id_the_stream_gave_out_deleted_or_not(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    """The tip 10-0 deleted: the stream holds 1-0..9-0 but gave out 10-0, an id it never writes
    again. Entry 10-0 and the instant 9 pass over nothing, so they are taken; entry 10-1 and
    the instant 10 are past what it gave out, refused, naming that id."""
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XDEL", "s", "10-0")
    broker = RedisBroker(redis_server.url)
    with pytest.raises(PositionRefused, match=r"entry 10-1 is past the last id stream 's' gave "):
        await broker.set_group_position("s", "g", Position.entry("10-1"))
    with pytest.raises(PositionRefused, match=r"the last id it gave out is 10-0"):
        await broker.set_group_position("s", "g", Position.timestamp(10))
    assert (await group_info(redis))["last-delivered-id"] == "0-0"  # nothing moved
    entry = await broker.set_group_position("s", "g", Position.entry("10-0"))
    assert (entry.now, entry.skipped, entry.last) == ("9-" + str(2**64 - 1), 9, "9-0")
    instant = await broker.set_group_position("s", "g", Position.timestamp(9))
    assert (instant.now, instant.skipped) == ("9-" + str(2**64 - 1), 0)
    if await entries_read_supported(redis):  # the deleted tip counts as read
        assert (instant.entries_read, (await group_info(redis))["entries-read"]) == (10, 10)
    await redis.execute("XADD", "s", "11-0", "_payload", "11")
    assert await next_read(redis) == ["11-0"]


async def test_a_dry_run_says_what_it_would_skip_and_changes_nothing(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "3-0")
    await next_read(redis, "a")  # 4-0 .. 10-0 pending for a
    before = await group_info(redis)
    broker = RedisBroker(redis_server.url)
    back = await broker.set_group_position("s", "g", Position.entry("2-0"), dry_run=True)
    assert (back.replayed, back.first, back.last, back.moved) == (9, "2-0", "10-0", False)
    assert back.pending == 7 and back.consumers == ("a",)
    assert await group_info(redis) == before
    assert await pending_count(redis, "s", "g") == 7


# ---- "a CLI form (trio-streams group set-position URL STREAM GROUP POSITION, with --dry-run
# showing what it would skip or replay)" -----------------------------------------------------


@pytest.mark.slow
async def test_the_cli_moves_a_group_and_its_dry_run_shows_what_it_would_skip_or_replay(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await preload(redis, 10)
    await redis.execute("XGROUP", "CREATE", "s", "g", "5-0")
    before = await group_info(redis)
    dry = await trio.to_thread.run_sync(
        lambda: cli("group", "set-position", redis_server.url, "s", "g", "end", "--dry-run")
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "group 'g' of stream 's': last delivered 5-0 -> 10-0, would skip 5 entries "
        "(6-0 .. 10-0); entries read would be 10 (dry run: nothing moved)"
    ]
    assert await group_info(redis) == before  # a dry run moves nothing
    back = await trio.to_thread.run_sync(
        lambda: cli("group", "set-position", redis_server.url, "s", "g", "ts:2", "--dry-run")
    )
    assert "would deliver 3 entries again (3-0 .. 5-0)" in back.stdout, back.stdout
    moved = await trio.to_thread.run_sync(
        lambda: cli("group", "set-position", redis_server.url, "s", "g", "8-0")
    )
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith("group 'g' of stream 's': last delivered 5-0 -> 7-")
    assert "skipped 2 entries (6-0 .. 7-0); entries read set to 7" in moved.stdout
    assert await next_read(redis) == ["8-0", "9-0", "10-0"]


async def test_the_cli_refuses_a_missing_group_with_one_line_and_status_1(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await preload(redis, 1)
    result = await trio.to_thread.run_sync(
        lambda: cli("group", "set-position", redis_server.url, "s", "g", "end")
    )
    assert result.returncode == 1
    assert stderr_lines(result)[0] == (
        "trio-streams group set-position: error: stream 's' has no consumer group 'g' "
        "(its groups: none)"
    )
    assert "Traceback" not in result.stderr


async def test_the_cli_refuses_a_key_of_another_type_giving_its_advice_once(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await redis.execute("SET", "str", "x")
    result = await trio.to_thread.run_sync(
        lambda: cli("group", "set-position", redis_server.url, "str", "billing", "end")
    )
    assert result.returncode == 1
    [line] = stderr_lines(result)
    assert line.startswith("trio-streams group set-position: error: ")
    assert "key 'str' holds a string, not a stream" in line
    assert line.count("use another key, or delete this one") == 1
    assert "Traceback" not in result.stderr


# ---- "a seek from a handler of a group subscription that follows the Seeking contract
# (generations: what was read at the old position is not delivered;" -------------------------


async def test_a_handlers_seek_moves_its_group_and_nothing_read_at_the_old_position_is_run(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    """A backlog of 100, read 10 at a time: the first handler seeks to entry 80 while 2..10 are
    queued. None of 2..79 runs (the seek skipped them), 80..100 run once each, and nothing is
    left pending: the skipped ones read at the old position were acknowledged."""
    await preload(redis, 100)
    must_run = [1, *range(80, 101)]
    ran: list[int] = []
    done = trio.Event()
    with Ledger(tmp_path / "ledger") as ledger:
        for n in must_run:
            ledger.published(n)
        app = App("svc")
        broker = app.broker(RedisBroker(redis_server.url))

        source = RedisStream("s", group="g", start=Position.beginning())

        @broker.subscriber(source, count=10, buffer=10, block=50)
        async def handle(n: int, ctx: Context) -> None:
            ran.append(n)
            ledger.run_began(n, ctx.attempt)
            if n == 1:
                await ctx.seeker.seek(Position.entry("80-0"))
            ledger.run_ended(n, "ack")
            if n == 100:
                done.set()

        async with serving(app):
            with trio.fail_after(20):
                await done.wait()
            await eventually(
                lambda: _none_pending(redis), what="the skipped read-ahead acknowledged"
            )
        report = ledger.check(pending=[])
    assert report.ok, report
    assert ran == must_run
    info = await group_info(redis)
    assert (info["lag"], info["entries-read"], info["pending"]) == (0, 100, 0)


async def _none_pending(redis: RedisClient) -> bool:
    return await pending_count(redis, "s", "g") == 0


# ---- "pending entries of this consumer are settled or handed back as the docs decide and say;"


async def test_a_seek_back_while_another_handler_runs_lets_it_settle_then_delivers_it_again(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """workers=2: entry 1's handler is running when entry 2's handler seeks back to entry 1.
    Entry 1's run settles as its handler says; 3..5, queued, are acknowledged as skipped; then
    1..5 are delivered again, each as a new delivery (attempt 1: a seek charges no attempt)."""
    await preload(redis, 5)
    runs: list[tuple[int, int]] = []
    release = trio.Event()
    seeks = 0
    done = trio.Event()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), workers=2, count=10, block=50
    )
    async def handle(n: int, ctx: Context) -> None:
        nonlocal seeks
        runs.append((n, ctx.attempt))
        if n == 1:
            await release.wait()
        if n == 2 and seeks == 0:
            seeks += 1
            await ctx.seeker.seek(Position.entry("1-0"))
            release.set()
        if len(runs) == 7:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
        await eventually(lambda: _none_pending(redis), what="every entry acknowledged")
    assert sorted(runs) == [(1, 1), (1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)]


# ---- "Entries claimed from a dead consumer and not delivered yet stay pending and are
# delivered: the group owes them to the dead consumer's work" -----------------------------------


async def dead_consumer_left(redis: RedisClient, count: int, *, idle: bool) -> None:
    """``count`` entries read by a consumer ``dead`` that never settles them; ``idle``: made
    idle for an hour, so the next reclaim pass claims them all at once."""
    await preload(redis, count)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XREADGROUP", "GROUP", "g", "dead", "COUNT", count, "STREAMS", "s", ">")
    if idle:
        ids = [f"{n}-0" for n in range(1, count + 1)]
        await redis.execute("XCLAIM", "s", "g", "dead", 0, *ids, "IDLE", 3_600_000, "JUSTID")


async def test_entries_claimed_from_a_dead_consumer_and_queued_are_delivered_after_a_seek(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """A dead consumer's 1..5, claimed by one reclaim pass and read in one batch: entry 1's
    handler seeks to the end while 2..5 are queued. The seek skips what the group had not
    read (nothing) and acknowledges none of the claimed entries: 2..5 are handed back to the
    reader, each runs once with attempt 1 (a purge charges nothing), and nothing is left
    pending. ``shared_seek``: ``dead`` read within the last 10 s, so it counts as live."""
    await dead_consumer_left(redis, 5, idle=True)
    runs: list[tuple[int, int]] = []
    done = trio.Event()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", consumer="live", min_idle=1, shared_seek=True)

    @broker.subscriber(source, count=10, workers=1, block=50)
    async def handle(n: int, ctx: Context) -> None:
        runs.append((n, ctx.attempt))
        if n == 1:
            await ctx.seeker.seek(Position.end())
        if {m for m, _ in runs} == {1, 2, 3, 4, 5}:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
        await eventually(lambda: _none_pending(redis), what="every claimed entry acknowledged")
    assert runs[0] == (1, 1)
    assert sorted(runs) == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    assert (await group_info(redis))["last-delivered-id"] == "5-0"


async def test_entries_of_a_dead_consumer_not_claimable_at_a_seek_are_delivered_later(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """The seek comes before the dead consumer's entries are idle enough to claim: its
    sweep leaves the other consumer's pending list alone, and once claimed they run."""
    await dead_consumer_left(redis, 3, idle=False)
    runs: list[tuple[int, int]] = []
    done = trio.Event()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", consumer="live", min_idle=2, shared_seek=True)

    @broker.subscriber(source, count=10, workers=1, block=50)
    async def handle(n: int, ctx: Context) -> None:
        runs.append((n, ctx.attempt))
        if n == 4:
            await ctx.seeker.seek(Position.end())
        if {m for m, _ in runs} == {1, 2, 3, 4}:
            done.set()

    async with serving(app):
        await redis.execute("XADD", "s", "4-0", "_payload", "4")
        with trio.fail_after(20):
            await done.wait()
        await eventually(lambda: _none_pending(redis), what="every entry acknowledged")
    assert sorted(runs) == [(1, 1), (2, 1), (3, 1), (4, 1)]


async def test_a_seek_back_over_claimed_entries_never_puts_one_in_two_hands(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """Entry 1's handler seeks back to the beginning while the claimed 2..5 are queued: they
    are delivered again from the pending list (owed), and the group's replay of 1..5, read
    while they are in hand (entry 2's handler waits for that read), hands out no second
    delivery of them. So 2..5 run once, 1 runs again as the replay, all with attempt 1, and
    nothing is left pending."""
    await dead_consumer_left(redis, 5, idle=True)
    runs: list[tuple[int, int]] = []
    seeks = 0
    done = trio.Event()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", consumer="live", min_idle=1, shared_seek=True)

    async def replay_read() -> bool:
        return bool((await group_info(redis))["last-delivered-id"] == "5-0")

    @broker.subscriber(source, count=10, buffer=10, workers=1, block=50)
    async def handle(n: int, ctx: Context) -> None:
        nonlocal seeks
        runs.append((n, ctx.attempt))
        if n == 1 and seeks == 0:
            seeks += 1
            await ctx.seeker.seek(Position.beginning())
            assert (await group_info(redis))["last-delivered-id"] == "0-0"
        elif n == 2:
            await eventually(replay_read, what="the group's replay read")
        if len(runs) == 6:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
        await eventually(lambda: _none_pending(redis), what="every entry acknowledged")
    assert runs == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (1, 1)]


# ---- "refused where other live consumers share the group, unless asked)" ------------------------


@pytest.mark.parametrize("shared", [False, True], ids=["refused", "shared_seek"])
async def test_a_seek_is_refused_while_another_consumer_is_live_unless_asked(
    redis_server: RedisServer, redis: RedisClient, shared: bool
) -> None:
    await preload(redis, 5)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XREADGROUP", "GROUP", "g", "other", "COUNT", 1, "STREAMS", "s", ">")
    refusals: list[str] = []
    seen: list[int] = []
    done = trio.Event()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("s", group="g", shared_seek=shared), name="sub", block=50)
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 2 and seen.count(2) == 1:
            try:
                await ctx.seeker.seek(Position.entry("4-0"))
            except SeekRefused as refused:
                refusals.append(str(refused))
                done.set()
        if n == 5:
            done.set()

    async with serving(app) as running:
        with trio.fail_after(20):
            await done.wait()
        if not shared:
            await running.wait_finished()  # a refused seek ends a live subscription
            assert running.subscriptions["sub"].value == "ended"
    if shared:
        assert refusals == [] and seen == [2, 4, 5]  # 3 skipped, "other" moved along
    else:
        [refusal] = refusals
        assert "group 'g' of stream 's' is shared with live consumers ('other')" in refusal
        assert "shared_seek=True" in refusal
        assert seen == [2]
        assert (await group_info(redis))["last-delivered-id"] == "5-0"  # not moved
        # What it had read and not handled stays pending, handed back to the group.
        assert await pending_count(redis, "s", "g") == 4


# ---- "Same refusals under app.test()." ---------------------------------------------------------


async def test_under_app_test_a_seek_is_refused_while_another_member_is_open() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))
    refusals: list[str] = []

    async def handle(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(Position.beginning())
        except SeekRefused as refused:
            refusals.append(str(refused))

    broker.subscriber(RedisStream("s", group="g"), name="one")(handle)
    broker.subscriber(RedisStream("s", group="g"), name="two")(handle)
    async with app.test() as t:
        await t.publish("s", 1)
    [refusal] = refusals
    assert "group 'g' of stream 's' is shared with live consumers" in refusal
    assert "shared_seek=True" in refusal


async def test_under_app_test_a_lone_member_seeks_its_group_and_a_sequence_is_refused() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))
    seen: list[int] = []
    refusals: list[str] = []

    @broker.subscriber(RedisStream("s", group="g"))
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3 and seen.count(3) == 1:
            try:
                await ctx.seeker.seek(Position.sequence(1))
            except SeekRefused as refused:
                refusals.append(str(refused))

    async with app.test() as t:
        for n in (1, 2, 3):
            await t.publish("s", n)
    assert seen == [1, 2, 3]
    [refusal] = refusals
    assert "Position.sequence(1) cannot address a Redis stream" in refusal

    moved = App("svc2")
    other = moved.broker(RedisBroker("redis://127.0.0.1:1"))
    again: list[int] = []

    @other.subscriber(RedisStream("s", group="g"))
    async def rewind(n: int, ctx: Context) -> None:
        again.append(n)
        if n == 3 and again.count(3) == 1:
            await ctx.seeker.seek(Position.beginning())

    async with moved.test() as t:
        for n in (1, 2, 3):
            await t.publish("s", n)
    assert again == [1, 2, 3, 1, 2, 3]


async def test_under_app_test_the_broker_call_moves_the_group_with_the_live_refusals() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))
    seen: list[int] = []

    @broker.subscriber(RedisStream("s", group="g"))
    async def handle(n: int) -> None:
        seen.append(n)

    async with app.test() as t:
        for n in (1, 2, 3):
            await t.publish("s", n)
        with pytest.raises(PositionRefused, match="cannot address a Redis stream"):
            await broker.set_group_position("s", "g", Position.sequence(1))
        with pytest.raises(GroupNotFound, match="stream 's' has no consumer group 'nope'"):
            await broker.set_group_position("s", "nope", Position.end())
        with pytest.raises(GroupNotFound, match="stream 'gone' does not exist"):
            await broker.set_group_position("gone", "g", Position.end())
        dry = await broker.set_group_position("s", "g", Position.beginning(), dry_run=True)
        assert (dry.replayed, dry.first, dry.last, dry.moved) == (3, "1", "3", False)
        move = await broker.set_group_position("s", "g", Position.beginning())
        assert move.replayed == 3
        await t.publish("s", 4)
    assert seen == [1, 2, 3, 1, 2, 3, 4]


async def test_under_app_test_a_refusal_names_its_stream_once() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))

    @broker.subscriber(RedisStream("events", group="g"))
    async def handle(n: int) -> None:
        del n

    async with app.test() as t:
        await t.publish("events", 1)
        refusals = []
        for position in (
            Position.timestamp(2**42),
            Position.sequence(0),
            Position.entry("1-0"),
            Position.timestamp(0, stream="x"),
        ):
            with pytest.raises(PositionRefused) as refused:
                await broker.set_group_position("events", "g", position)
            refusals.append(str(refused.value))
    assert refusals[0] == "stream 'events' holds no message later than 4398046511104 ms"
    for said in refusals:
        assert said.count("'events'") == 1, said


# ---- the nasty cases ---------------------------------------------------------------------------


async def test_seeks_racing_shutdown_lose_nothing_acknowledged(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """Four workers seek back again and again while the app stops: every seek after the stop
    is refused, the stop is prompt, and what was never handled stays pending (for the next
    start), never acknowledged unhandled."""
    await preload(redis, 20)
    handled: set[int] = set()
    looping = trio.Event()
    app = App("svc", shutdown_timeout=30)
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), workers=4, buffer=8, block=50
    )
    async def handle(n: int, ctx: Context) -> None:
        looping.set()
        try:
            await ctx.seeker.seek(Position.entry(f"{1 + n % 7}-0"))
        except SeekRefused:
            pass
        handled.add(n)

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        with trio.fail_after(20):
            await looping.wait()
            await running.aclose()
    pending = await redis.execute("XPENDING", "s", "g", "-", "+", 100)
    pending_ids = {int(text(entry[0]).split("-")[0]) for entry in pending}
    delivered_up_to = int((await group_info(redis))["last-delivered-id"].split("-")[0])
    # Every entry either ran, is still pending, or is after the group's last delivered id
    # (its next start reads it): a seek's skip acknowledged nothing it did not move back over.
    for n in range(1, 21):
        assert n in handled or n in pending_ids or n > delivered_up_to, (n, delivered_up_to)


async def test_a_group_moves_and_seeks_on_a_cluster(redis_cluster: RedisClusterServers) -> None:
    tag = "{" + secrets.token_hex(4) + "}"
    stream = f"{tag}.orders"
    async with connect(redis_cluster.url) as redis:
        for n in range(1, 6):
            await redis.execute("XADD", stream, f"{n}-0", "_payload", str(n))
        await redis.execute("XGROUP", "CREATE", stream, "g", "0")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(RedisStream(stream, group="g"), block=50)
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 2 and seen.count(2) == 1:
            await ctx.seeker.seek(Position.entry("5-0", stream=stream))
        if n == 5:
            done.set()

    move = await broker.set_group_position(stream, "g", Position.entry("2-0"))
    assert move.skipped == 1 and move.entries_read == 1
    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
    assert seen == [2, 5]
