"""Recording Redis streams, lists and channels into stream files, and replaying them back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.redis.client.redis_waits import wait_until_blocked
from tests.redis_servers import RedisServer, redis_server
from trio_streams import Position
from trio_streams.file.writer import StreamWriter
from trio_streams.record import (
    ID_HEADER,
    Pacing,
    RecordingClash,
    parse_bounds,
    record_channel,
    record_list,
    record_stream,
    replay_file,
)
from trio_streams.record.recorder import InvalidFileKey
from trio_streams.record.replayer import ReplayError
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.frames import decode_frame, encode_frame

from .support import add_entries, group_state, raw_entries, recorded


async def record(redis: RedisClient, key: str, path: Path, **options: object) -> None:
    with StreamWriter(path) as writer:
        await record_stream(redis, key, writer, **options)  # type: ignore[arg-type]


async def test_round_trip_n_entries_with_headers_replayed_into_a_second_server_are_identical(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 2500)  # three XRANGE pages
    await record(redis, "orders", tmp_path / "r.ss")
    with redis_server() as second:
        async with connect(second.url) as other:
            summary = await replay_file(tmp_path / "r.ss", other)
            assert summary.published == 2500
            copied = await raw_entries(other, "orders")
    original = await raw_entries(redis, "orders")
    assert [fields for _, fields in copied] == [fields for _, fields in original]


async def test_the_stream_key_becomes_the_files_stream_key_and_the_entry_time_its_timestamp(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 3)
    await record(redis, "orders", tmp_path / "r.ss")
    assert recorded(tmp_path / "r.ss") == [
        ("orders", n + 1, 1000 + 1000 * n, b'{"n":%d}' % n,
         {"trace": f"t{n}", "tenant": "eu", ID_HEADER: f"{1000 + 1000 * n}-0"})
        for n in range(3)
    ]  # fmt: skip


async def test_the_recorded_id_header_is_not_resent_unless_asked(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 1)
    await record(redis, "orders", tmp_path / "r.ss")
    await replay_file(tmp_path / "r.ss", redis, rename="plain")
    await replay_file(tmp_path / "r.ss", redis, rename="kept", keep=[ID_HEADER])
    [(_, plain)] = await raw_entries(redis, "plain")
    [(_, kept)] = await raw_entries(redis, "kept")
    assert b"h:" + ID_HEADER.encode() not in plain
    assert kept[-2:] == [b"h:" + ID_HEADER.encode(), b"1000-0"]


async def test_from_and_until_bound_the_recording(redis: RedisClient, tmp_path: Path) -> None:
    await add_entries(redis, "orders", 10)  # ids 1000-0 .. 10000-0
    await record(redis, "orders", tmp_path / "ids.ss", bounds=parse_bounds("3000-0", "5000-0"))
    await record(redis, "orders", tmp_path / "ts.ss", bounds=parse_bounds("ts:3000", "ts:5000"))
    assert [m[2] for m in recorded(tmp_path / "ids.ss")] == [3000, 4000, 5000]
    assert [m[2] for m in recorded(tmp_path / "ts.ss")] == [4000, 5000]


async def test_without_follow_the_recording_ends_at_the_entry_last_when_it_began(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 3)
    pages = 0

    def more(summary: object) -> None:
        nonlocal pages
        pages += 1

    with StreamWriter(tmp_path / "r.ss") as writer:
        async with trio.open_nursery() as nursery:

            async def produce() -> None:
                for n in range(20):
                    await redis.execute("XADD", "orders", f"{100_000 + n}-0", "_payload", b"x")

            nursery.start_soon(produce)
            await record_stream(redis, "orders", writer, page=1, on_page=more)
    assert [m[2] for m in recorded(tmp_path / "r.ss")][:3] == [1000, 2000, 3000]
    assert len(recorded(tmp_path / "r.ss")) == 3


async def test_follow_records_entries_added_after_the_backlog_with_xread(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 2)
    with StreamWriter(tmp_path / "r.ss") as writer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: record_stream(redis, "orders", writer, follow=True, limit=5))
            await wait_until_blocked(redis, "xread")
            for n in range(3):
                await redis.execute("XADD", "orders", f"{50_000 + n}-0", "_payload", b"new")
    assert [m[2] for m in recorded(tmp_path / "r.ss")] == [1000, 2000, 50_000, 50_001, 50_002]


async def test_from_end_records_only_what_comes_next(redis: RedisClient, tmp_path: Path) -> None:
    await add_entries(redis, "orders", 2)
    with StreamWriter(tmp_path / "r.ss") as writer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: record_stream(
                    redis, "orders", writer, bounds=parse_bounds("end", None), follow=True, limit=1
                )
            )
            await wait_until_blocked(redis, "xread")
            await redis.execute("XADD", "orders", "90000-0", "_payload", b"next")
    assert [m[3] for m in recorded(tmp_path / "r.ss")] == [b"next"]


async def test_recording_leaves_a_groups_state_alone_while_a_producer_writes_and_a_group_consumes(
    redis: RedisClient, tmp_path: Path
) -> None:
    """The same script of XADD / XREADGROUP / XACK on two servers, one of them recorded while it
    runs: the groups end the same, and the recorded server ran no group command but the
    script's."""
    with redis_server() as control_server:
        async with connect(control_server.url) as control:

            async def script(target: RedisClient, rounds: int) -> None:
                await target.execute("XGROUP", "CREATE", "orders", "g", "0", "MKSTREAM")
                for n in range(rounds):
                    for k in range(10):
                        await target.execute(
                            "XADD", "orders", f"{1000 + n}-{k}", "_payload", b"%d" % k
                        )
                    reply = await target.execute(
                        "XREADGROUP", "GROUP", "g", "c1", "COUNT", 6, "STREAMS", "orders", ">"
                    )
                    ids = (
                        [entry[0] for entry in reply[0][1]]
                        if isinstance(reply, list)
                        else [entry[0] for entry in next(iter(reply.values()))]
                    )
                    await target.execute("XACK", "orders", "g", *ids[:4])

            async def state(target: RedisClient) -> object:
                return group_state(
                    await target.execute("XINFO", "GROUPS", "orders"),
                    await target.execute("XPENDING", "orders", "g", "-", "+", 1000),
                    await target.execute("XINFO", "CONSUMERS", "orders", "g"),
                )

            await redis.execute("CONFIG", "RESETSTAT")
            with StreamWriter(tmp_path / "r.ss") as writer:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        lambda: record_stream(redis, "orders", writer, follow=True, limit=200)
                    )
                    await script(redis, 20)
            await script(control, 20)
            assert await state(redis) == await state(control)
            stats = (await redis.execute("INFO", "commandstats")).decode()
    calls = {
        line.split(":")[0].removeprefix("cmdstat_"): int(line.split("calls=")[1].split(",")[0])
        for line in stats.splitlines()
        if line.startswith("cmdstat_")
    }
    assert calls.get("xreadgroup") == 20 and calls.get("xack") == 20
    assert "xclaim" not in calls and "xautoclaim" not in calls
    assert calls.get("xgroup|create") == 1 and "xgroup|createconsumer" not in calls
    assert len(recorded(tmp_path / "r.ss")) == 200


async def test_an_entry_another_producer_wrote_without_payload_replays_its_fields(
    redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("XADD", "events", "1-0", "kind", "click", "at", "home")
    await record(redis, "events", tmp_path / "r.ss")
    [(_, _, _, payload, headers)] = recorded(tmp_path / "r.ss")
    assert json.loads(payload) == {"kind": "click", "at": "home"}
    assert headers["x-redis-fields"] == "json"
    await replay_file(tmp_path / "r.ss", redis, rename="copy")
    [(_, fields)] = await raw_entries(redis, "copy")
    assert fields == [b"kind", b"click", b"at", b"home"]


async def test_a_redis_key_that_cannot_be_a_file_key_is_refused_with_a_hint(
    redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("XADD", "orders:eu", "1-0", "_payload", b"x")
    with StreamWriter(tmp_path / "r.ss") as writer:
        with pytest.raises(InvalidFileKey, match="orders:eu") as caught:
            await record_stream(redis, "orders:eu", writer)
        await record_stream(redis, "orders:eu", writer, key="orders-eu")
    assert caught.value.hint() == "name the file's stream key with --key NAME"
    assert [m[0] for m in recorded(tmp_path / "r.ss")] == ["orders-eu"]


async def test_an_entry_that_already_carries_the_id_header_is_refused_not_overwritten(
    redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("XADD", "orders", "5-0", "_payload", b"x", "h:x-redis-id", "1-0")
    with StreamWriter(tmp_path / "r.ss") as writer:
        with pytest.raises(RecordingClash, match="5-0"):
            await record_stream(redis, "orders", writer)
        await record_stream(redis, "orders", writer, id_header="x-recorded-id")
    [(_, _, _, _, headers)] = recorded(tmp_path / "r.ss")
    assert headers == {"x-redis-id": "1-0", "x-recorded-id": "5-0"}


async def test_a_list_is_recorded_head_first_without_taking_anything(
    redis: RedisClient, tmp_path: Path
) -> None:
    for n in range(3):
        await redis.execute("RPUSH", "jobs", encode_frame(b"job%d" % n, {"try": str(n)}))
    await redis.execute("RPUSH", "jobs", b"plain value")
    with StreamWriter(tmp_path / "r.ss") as writer:
        summary = await record_list(redis, "jobs", writer)
    assert summary.entries == 4
    assert await redis.execute("LLEN", "jobs") == 4
    assert [(m[3], m[4]) for m in recorded(tmp_path / "r.ss")] == [
        (b"job0", {"try": "0", "x-redis-list": "jobs"}),
        (b"job1", {"try": "1", "x-redis-list": "jobs"}),
        (b"job2", {"try": "2", "x-redis-list": "jobs"}),
        (b"plain value", {"x-redis-list": "jobs"}),
    ]  # fmt: skip
    await replay_file(tmp_path / "r.ss", redis, rename="jobs2", target="list")
    # Pushed back as frames: a plain value comes back framed, with no headers, as it reads.
    copied = await redis.execute("LRANGE", "jobs2", 0, -1)
    original = await redis.execute("LRANGE", "jobs", 0, -1)
    assert [decode_frame(v) for v in copied] == [decode_frame(v) for v in original]


async def test_a_channel_is_recorded_while_subscribed(redis: RedisClient, tmp_path: Path) -> None:
    subscribed = trio.Event()
    with StreamWriter(tmp_path / "r.ss") as writer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: record_channel(redis, "news", writer, limit=2, on_subscribed=subscribed.set)
            )
            await subscribed.wait()
            await redis.execute("PUBLISH", "news", encode_frame(b"one", {"k": "v"}))
            await redis.execute("PUBLISH", "news", b"two")
    assert [(m[3], m[4]) for m in recorded(tmp_path / "r.ss")] == [
        (b"one", {"k": "v", "x-redis-channel": "news"}),
        (b"two", {"x-redis-channel": "news"}),
    ]


async def test_a_replay_stops_at_the_first_refused_message_naming_it(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 2)
    await record(redis, "orders", tmp_path / "r.ss")
    await redis.execute("SET", "taken", "not a stream")
    with pytest.raises(ReplayError, match=r"message #1 of 'orders'.*'taken'.*WRONGTYPE"):
        await replay_file(tmp_path / "r.ss", redis, rename="taken")


async def test_a_replay_paced_as_recorded_keeps_order_and_waits_on_trios_clock(
    redis: RedisClient, tmp_path: Path
) -> None:
    for n in range(3):
        await redis.execute("XADD", "orders", f"{1000 + 10 * n}-0", "_payload", b"%d" % n)
    await record(redis, "orders", tmp_path / "r.ss")
    began = trio.current_time()
    summary = await replay_file(
        tmp_path / "r.ss", redis, rename="copy", pacing=Pacing.as_recorded()
    )
    assert summary.published == 3
    assert trio.current_time() - began >= 0.02  # the recorded gaps, 10 ms each
    assert [f[1] for _, f in await raw_entries(redis, "copy")] == [b"0", b"1", b"2"]


async def test_a_replay_leaves_out_an_id_header_recorded_under_another_name(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 1)
    await record(redis, "orders", tmp_path / "r.ss", id_header="x-src-id")
    await replay_file(tmp_path / "r.ss", redis, rename="copy", id_header="x-src-id")
    [(_, fields)] = await raw_entries(redis, "copy")
    assert fields == [b"_payload", b'{"n":0}', b"h:trace", b"t0", b"h:tenant", b"eu"]


async def test_a_replay_from_a_time_starts_after_it_as_recorded(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 5)  # at 1000 .. 5000 ms
    await record(redis, "orders", tmp_path / "r.ss")
    await replay_file(
        tmp_path / "r.ss", redis, rename="copy", keys=["orders"], start=Position.timestamp(3000)
    )
    assert [f[1] for _, f in await raw_entries(redis, "copy")] == [b'{"n":3}', b'{"n":4}']


async def test_recording_into_an_existing_file_goes_on_with_its_sequence_numbers(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 3)
    await record(redis, "orders", tmp_path / "r.ss", bounds=parse_bounds(None, "2000-0"))
    await record(redis, "orders", tmp_path / "r.ss", bounds=parse_bounds("3000-0", None))
    assert [(m[1], m[2]) for m in recorded(tmp_path / "r.ss")] == [(1, 1000), (2, 2000), (3, 3000)]
