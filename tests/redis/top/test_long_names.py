"""At 80 columns, the live view of ``top`` never shows two different rows the same: groups of a
long-named stream and consumers with long names keep the part that tells them apart."""

from __future__ import annotations

from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.top.view import RedisWatch

from .terminal import screen_shows, session, start_top

__all__ = ["session"]  # the fixture

STREAM = "orders-with-a-really-long-stream-name-used-by-the-billing-team-eu-west-1"
GROUPS = ("billing-group", "shipping-group")
#: Consumer names as long as the column, that differ only in the middle.
CONSUMERS = tuple(f"consumer-on-host-{n}-of-the-eu-west-1-cluster-running-the-app" for n in "ab")


async def long_names(redis: RedisClient) -> None:
    await redis.execute("XADD", STREAM, "*", "_payload", "1")
    for group in GROUPS:
        await redis.execute("XGROUP", "CREATE", STREAM, group, "0")
        for consumer in CONSUMERS:
            await redis.execute("XGROUP", "CREATECONSUMER", STREAM, group, consumer)


def rendered(screen: object, width: int) -> str:
    from rich.console import Console

    from trio_streams.top.live import _renderable, _State

    console = Console(width=width, record=True, color_system=None)
    console.print(_renderable(screen, _State(), width))  # type: ignore[arg-type]
    return console.export_text()


def names_of(text: str, title: str) -> list[str]:
    """The name of every row of the table ``title`` (its first band), a name folded over
    several lines joined again: a row's first line is the one with figures after its name."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(title))
    header = lines[start + 1]
    column = header.index(header.split()[1]) - 1  # the name column ends before the next header
    names: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith(" "):
            break
        name, rest = line[:column].strip(), line[column:].strip()
        if rest or not names:
            names.append(name)
        else:
            names[-1] += name
    return names


async def test_at_80_columns_rows_of_different_groups_and_consumers_never_look_the_same(
    redis: RedisClient,
) -> None:
    await long_names(redis)
    watch = RedisWatch(redis, "test")
    await watch.refresh()
    text = rendered(watch.screen(sort="name", match=""), 80)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    streams = names_of(text, "streams")
    assert len(streams) == 3 and len(set(streams)) == 3, text
    for group in GROUPS:  # a group's own name is kept whole, at the end of its row
        assert sum(name.endswith(f"/{group}") for name in streams) == 1, text
    consumers = names_of(text, "consumers")
    # No single cut keeps these apart (they differ in the group and in the middle of the
    # consumer's name): they are shown whole.
    assert sorted(consumers) == sorted(
        f"{STREAM}/{group}/{consumer}" for group in GROUPS for consumer in CONSUMERS
    ), text
    assert "…" not in text.partition("consumers")[2], text  # no figure or header cut


async def test_consumers_that_differ_at_the_end_are_cut_in_the_middle_keeping_their_end(
    redis: RedisClient,
) -> None:
    stream = "orders-" + "x" * 60
    await redis.execute("XADD", stream, "*", "_payload", "1")
    await redis.execute("XGROUP", "CREATE", stream, "workers", "0")
    for consumer in ("worker-1", "worker-2"):
        await redis.execute("XGROUP", "CREATECONSUMER", stream, "workers", consumer)
    watch = RedisWatch(redis, "test")
    await watch.refresh()
    text = rendered(watch.screen(sort="name", match=""), 80)
    consumers = names_of(text, "consumers")
    assert len(consumers) == 2 and all("…" in name for name in consumers), text
    assert sorted(name[-16:] for name in consumers) == ["workers/worker-1", "workers/worker-2"]


async def test_at_80_columns_the_live_view_in_a_terminal_names_every_group(
    redis_server: RedisServer, redis: RedisClient, session: str
) -> None:
    await long_names(redis)
    await start_top(session, redis_server.url, "--interval", "0.2", columns=80, rows=50)
    screen = await screen_shows(session, "consumers")
    screen = await screen_shows(session, "/shipping-group")
    assert "/billing-group" in screen, screen
    assert all(len(line) <= 80 for line in screen.splitlines())
