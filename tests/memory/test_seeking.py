"""Seeking on the in-process transport where it differs from other transports: consumer groups
and subscriptions to several streams.

The Seeking contract itself is stated once for every transport in
``trio_streams/testing/conformance/seeking.py``.
"""

import pytest
import trio

from trio_streams import (
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    Position,
    SeekRefused,
    UnsupportedError,
)
from trio_streams.core.positions import MAX_TIMESTAMP_MS


async def run_to_end(app: App) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()


async def test_consumer_group_members_cannot_seek() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    errors: list[Exception] = []

    @broker.subscriber(MemoryStream("s", group="g"))
    async def handle(n: int, ctx: Context) -> None:
        try:
            ctx.seeker  # noqa: B018
        except UnsupportedError as exc:
            errors.append(exc)

    async with app.test() as t:
        await t.publish("s", 1)
    assert "cannot seek" in str(errors[0])


async def test_a_sequence_must_name_its_stream_when_several_are_read() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    for stream, n in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]:
        broker.hub.append(stream, str(n).encode(), {})
    seen: list[int] = []
    errors: list[str] = []

    @broker.subscriber(MemoryStream("a", "b").replay())
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 5 and seen.count(5) == 1:
            try:
                await ctx.seeker.seek(Position.sequence(1))
            except SeekRefused as refused:
                errors.append(str(refused))
            # sequence 2 of stream b is the fourth message: both streams resume there
            await ctx.seeker.seek(Position.sequence(2, stream="b"))

    await run_to_end(app)
    assert len(errors) == 1 and "must name one of the streams" in errors[0]
    assert seen == [1, 2, 3, 4, 5, 4, 5]


# ---- The conformance suite checks only that these are refused (any transport words its own
# refusals); what the in-process transport says is checked here.


async def refused_live_seek(position: Position) -> str:
    """What a live in-process subscription's refusal of a seek to ``position`` says."""
    app = App("seek")
    broker = app.broker(MemoryBroker())
    refusals: list[str] = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(position)
        except SeekRefused as refused:
            refusals.append(str(refused))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await broker.publish("s", 1)
            await running.wait_stopped()  # the refusal ended the subscription
    assert len(refusals) == 1
    return refusals[0]


async def test_a_refused_live_seek_says_there_is_no_message_later_than_the_instant() -> None:
    said = await refused_live_seek(Position.timestamp(MAX_TIMESTAMP_MS))
    assert "no message" in said and "later than" in said


async def test_a_seek_to_an_entry_id_is_refused_naming_it() -> None:
    assert "entry id" in await refused_live_seek(Position.entry("1526985054069-0"))


def test_a_source_refuses_to_start_at_an_entry_id_saying_what_entry_ids_address() -> None:
    with pytest.raises(ConfigurationError, match="entry ids address Redis streams"):
        MemoryStream("s", start_at=Position.entry("1-0")).replay()
