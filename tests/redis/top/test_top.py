"""``trio-streams top``: the numbers of a scripted scenario, ``--once``, and stream files."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.cli.support import cli
from tests.redis_servers import RedisServer
from trio_streams.cli.top import screen_text
from trio_streams.file.writer import StreamWriter
from trio_streams.redis.client import RedisClient
from trio_streams.top import FileSampler, file_rows, redis_rows, sample_redis
from trio_streams.top.redis_sample import find_streams
from trio_streams.top.view import RedisWatch

from .scenario import between, setup


async def test_top_numbers_match_a_scripted_scenario_known_rates_stuck_consumer_dead_letters(
    redis: RedisClient,
) -> None:
    await setup(redis)
    keys = await find_streams(redis)
    assert keys == ["orders", "orders.dead"]  # the delay ZSET is not a stream
    before = await sample_redis(redis, keys, now=10.0)
    await between(redis)
    after = await sample_redis(redis, keys, now=12.0)
    orders, dead = redis_rows(after, before, stuck_after=0.0)
    assert (orders.key, orders.length, orders.added_per_s) == ("orders", 60, 25.0)
    assert (orders.delayed, orders.delayed_due, orders.dead_letter_of) == (3, 2, None)
    [group] = orders.groups
    assert (group.name, group.pending, group.lag) == ("workers", 5, 15)
    assert (group.delivered_per_s, group.acked_per_s) == (17.5, 15.0)
    assert [(c.name, c.pending) for c in group.consumers] == [("fast", 0), ("stuck", 5)]
    assert group.stuck == ("stuck",)
    assert (dead.key, dead.length, dead.added_per_s, dead.dead_letter_of) == (
        "orders.dead", 5, 2.0, "orders",
    )  # fmt: skip


async def test_without_a_previous_snapshot_rates_are_unknown(redis: RedisClient) -> None:
    await setup(redis)
    [orders, _] = redis_rows(await sample_redis(redis, ["orders", "orders.dead"], now=1.0), None)
    assert orders.added_per_s is None and orders.groups[0].delivered_per_s is None


async def test_the_text_view_shows_the_same_numbers(redis: RedisClient) -> None:
    await setup(redis)
    watch = RedisWatch(redis, "test", stuck_after=0.0)
    await watch.refresh()
    await between(redis)
    await watch.refresh()
    text = screen_text(watch.screen(sort="name", match=""))
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert lines["orders"][1] == "60" and lines["orders"][-3:] == ["3", "2", "-"]
    assert lines["orders/workers"][1:3] == ["5", "15"]
    assert lines["orders/workers"][5:] == ["2", "(1", "stuck)"]  # consumers
    assert lines["orders.dead"][1] == "5" and lines["orders.dead"][-1] == "orders"
    stuck, fast = lines["orders/workers/stuck"], lines["orders/workers/fast"]
    assert (stuck[1], stuck[3], fast[1], fast[3]) == ("5", "stuck", "0", "ok")
    filtered = screen_text(watch.screen(sort="name", match="dead"))
    assert "orders.dead" in filtered and "orders/workers" not in filtered


async def test_a_stream_written_by_another_framework_shows_as_well(redis: RedisClient) -> None:
    await redis.execute("XADD", "faststream-orders", "*", "data", "x")  # no _payload, no h:
    await redis.execute("XGROUP", "CREATE", "faststream-orders", "svc", "0")
    await redis.execute("XADD", "faststream-orders.dlq", "*", "data", "x")
    snapshot = await sample_redis(
        redis, await find_streams(redis), now=0.0, dead_letter_globs=["*.dlq"]
    )
    [stream, dlq] = redis_rows(snapshot, None)
    assert (stream.length, stream.groups[0].lag, stream.dead_letter_of) == (1, 1, None)
    assert dlq.dead_letter_of == ""


async def test_top_once_prints_one_snapshot_as_text(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await setup(redis)
    result = await trio.to_thread.run_sync(
        lambda: cli("top", redis_server.url, "--once", "--interval", "0.05")
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.strip()}
    assert lines["orders"][1:3] == ["10", "0.0"]  # nothing happens: no entries added
    assert lines["orders/workers"][1:5] == ["0", "0", "0.0", "0.0"]
    assert lines["orders.dead"][-1] == "orders"
    assert "rates over" in result.stdout


def test_top_of_a_stream_file_counts_messages_per_key_and_bytes_behind(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    with StreamWriter(path) as writer:
        for n in range(10):
            writer.append("orders", b"x", 1000 + n)
        writer.flush()
        with FileSampler(path, budget=1, batch=3) as sampler:
            first = sampler.sample(0.0)
            assert first.behind > 0  # read a little at a time: it shows how far it lags
            while (snapshot := sampler.sample(0.5)).behind:
                pass
            assert snapshot.keys["orders"].messages == 10
        with FileSampler(path) as sampler:
            snapshot = sampler.sample(0.5)
            for n in range(6):
                writer.append("audit", b"y", 2000 + n)
            writer.flush()
            later = sampler.sample(2.5)
    rows = {row.key: row for row in file_rows(later, snapshot)}
    assert (rows["audit"].messages, rows["audit"].per_s) == (6, 3.0)
    assert (rows["orders"].per_s, rows["orders"].first_seq, rows["orders"].last_seq) == (0.0, 1, 10)


def test_top_once_of_a_stream_file(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    with StreamWriter(path) as writer:
        for n in range(3):
            writer.append("orders", b"x", 1000 + n)
    result = cli("top", str(path), "--once", "--interval", "0.01")
    assert result.returncode == 0, result.stderr
    assert "0 bytes behind the writer" in result.stdout
    assert ["orders", "3", "0.0", "1..3"] in [line.split() for line in result.stdout.splitlines()]


def test_the_live_view_without_a_terminal_says_to_use_once(tmp_path: Path) -> None:
    result = cli("top", str(tmp_path / "f.ss"))
    assert result.returncode == 1 and "--once" in result.stderr


def _large_file(path: Path, size: int, count: int) -> None:
    with StreamWriter(path) as writer:
        for n in range(count):
            writer.append("big", bytes([n % 256]) * size, 1000 + n)


def test_a_file_refresh_reads_at_most_its_budget_even_when_messages_are_large(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.ss"
    _large_file(path, 60_000, 200)  # 12 MB
    budget = 1 << 20
    with FileSampler(path, budget=budget) as sampler:
        offset = sampler.sample(0.0).offset
        assert 0 < offset <= 4096 + budget
        while (snapshot := sampler.sample(1.0)).behind:
            assert 0 < snapshot.offset - offset <= budget
            offset = snapshot.offset
    assert snapshot.keys["big"].messages == 200


def test_a_message_larger_than_the_budget_is_read_alone(tmp_path: Path) -> None:
    path = tmp_path / "big.ss"
    _large_file(path, 300_000, 3)
    with FileSampler(path, budget=100_000) as sampler:
        counts = [sampler.sample(float(n)).keys["big"].messages for n in range(3)]
    assert counts == [1, 2, 3]


def test_the_rate_of_a_file_is_of_messages_written_since_the_last_refresh_not_of_catching_up(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    with StreamWriter(path) as writer:
        for n in range(3000):
            writer.append("orders", b"x" * 100, 1000 + n)
        writer.flush()
        with FileSampler(path, budget=100_000) as sampler:
            first = sampler.sample(0.0)
            second = sampler.sample(1.0)  # still catching up on a file nobody writes
            assert second.behind > 0
            [row] = file_rows(second, first)
            assert row.per_s == 0.0
            for n in range(10):
                writer.append("orders", b"y", 9000 + n)
            writer.flush()
            third = sampler.sample(2.0)  # behind and the file grew: the rate is not known yet
            assert third.behind > 0
            assert file_rows(third, second)[0].per_s is None
            while (caught_up := sampler.sample(3.0)).behind:
                third = caught_up
            fourth = sampler.sample(5.0)
            assert file_rows(caught_up, third)[0].per_s in (0.0, None)
            for n in range(4):
                writer.append("orders", b"z", 9100 + n)
            writer.flush()
            fifth = sampler.sample(7.0)
    assert file_rows(fourth, caught_up)[0].per_s == 0.0
    assert file_rows(fifth, fourth)[0].per_s == 2.0
