"""Resumable consumers: the watermark, the sidecar store, and resuming after a stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from tests.support import serving
from trio_streams import App, Context, Delivery
from trio_streams.file import (
    DurableLockedError,
    DurableStateError,
    FileBroker,
    FilePosition,
    FileStream,
)
from trio_streams.file.durable import DurableStore, StoredPosition, Watermark
from trio_streams.file.writer import StreamWriter

from .apps import Watch, file_app, replay_app, run_to_end, write_numbers

# ---- the watermark --------------------------------------------------------------------------


def _delivery(stream: str, seq: int) -> Delivery:
    return Delivery(stream, b"", position=FilePosition.sequence(seq, stream=stream))


START = StoredPosition.at_offset(128)


def test_the_watermark_never_passes_a_delivery_that_has_not_settled() -> None:
    watermark = Watermark(START)
    numbers = [watermark.track(_delivery("s", seq)) for seq in range(1, 6)]
    assert not watermark.settled(numbers[1])
    assert not watermark.settled(numbers[2])
    assert watermark.committed == START  # 1 is still in a handler
    assert watermark.settled(numbers[0])
    assert watermark.committed == StoredPosition("s", 3)
    assert not watermark.settled(numbers[4])
    assert watermark.committed == StoredPosition("s", 3)
    assert watermark.settled(numbers[3])
    assert watermark.committed == StoredPosition("s", 5)
    assert watermark.moved == 5 and watermark.in_flight == 0


def test_after_a_restart_settles_of_what_was_read_before_move_nothing() -> None:
    watermark = Watermark(StoredPosition("s", 10))
    old = [watermark.track(_delivery("s", seq)) for seq in (11, 12)]
    # A seek landed at byte 500: 11 and 12 were read at the old position.
    watermark.restart(StoredPosition.at_offset(500))
    new = watermark.track(_delivery("s", 3))
    assert not watermark.settled(old[0])
    assert watermark.committed == StoredPosition.at_offset(500)
    assert watermark.settled(new)
    assert watermark.committed == StoredPosition("s", 3)


# ---- the store ------------------------------------------------------------------------------


def _store(path: Path, name: str = "c", created: int = 1) -> DurableStore:
    return DurableStore(str(path), name, file_created_at_ms=created)


def test_the_store_keeps_a_position_beside_the_file_and_replaces_it_atomically(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    store = _store(path)
    assert store.stored is None
    store.save(StoredPosition("orders", 41))
    store.save(StoredPosition("orders", 42))
    store.close()
    directory = tmp_path / "s.ss.consumers"
    assert sorted(p.name for p in directory.iterdir()) == ["c.json", "c.lock"]  # no temp left
    state = json.loads((directory / "c.json").read_text())
    assert state == {
        "format": 1,
        "file": "s.ss",
        "file_created_at_ms": 1,
        "stream": "orders",
        "sequence": 42,
        "offset": None,
    }
    again = _store(path)
    assert again.stored == StoredPosition("orders", 42)
    again.close()


def test_one_consumer_of_a_name_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    first = _store(path)
    with pytest.raises(DurableLockedError, match="'c' is already running"):
        _store(path)
    other = _store(path, "other")  # another name is another consumer
    first.close()
    _store(path).close()
    other.close()


def _state(**changes: object) -> bytes:
    state = {"format": 1, "file_created_at_ms": 1, "stream": "s", "sequence": 1, "offset": None}
    if "created" in changes:
        changes["file_created_at_ms"] = changes.pop("created")
    return json.dumps({**state, **changes}).encode()


def test_the_store_reads_back_both_kinds_of_position(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    for position in (StoredPosition.after("s", 0), StoredPosition.at_offset(128)):
        store = _store(path)
        store.save(position)
        store.close()
        again = _store(path)
        assert again.stored == position
        again.close()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "unreadable"),
        (b'{"format": 2}', "not a format 1 consumer state"),
        (_state(stream=5), "neither a stream and sequence number nor a file offset"),
        (_state(sequence=-1), "neither"),
        (_state(stream=None, sequence=None), "neither"),
        (_state(stream=None, sequence=None, offset=12), "neither"),
        (_state(offset=200), "neither"),
        (b'{"format": 1, "file_created_at_ms": 1}', "unreadable"),
        (_state(created=7), "belongs to a stream file created at 7 ms"),
    ],
)
def test_a_state_that_cannot_be_used_is_a_clear_error_naming_it(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "s.ss"
    _store(path).close()
    state = tmp_path / "s.ss.consumers" / "c.json"
    state.write_bytes(content)
    with pytest.raises(DurableStateError, match=reason) as error:
        _store(path)
    assert error.value.path == str(state)
    _store(path, "c2").close()  # the failed open released its lock


# ---- resuming -------------------------------------------------------------------------------


def _durable_app(path: Path, seen: list[int], stop_after: int) -> tuple[App, Watch]:
    """A live durable consumer that asks its app to stop once it has seen ``stop_after``."""
    app, broker = file_app(path, existing_only=True)
    watch = Watch()

    @broker.subscriber(
        FileStream("s", durable="billing", start_at=FilePosition.beginning()),
        workers=4,
        buffer=4,
        count=4,
    )
    async def handle(n: int) -> None:
        await trio.sleep(0.001 * (n % 3))  # settles finish out of order
        seen.append(n)
        if len(seen) == stop_after:
            (await watch.running()).request_stop()

    return app, watch


async def test_a_durable_consumer_resumes_after_a_graceful_stop_with_nothing_twice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 60)
    first: list[int] = []
    app, watch = _durable_app(path, first, 20)
    await watch.run_to_end(app)
    second: list[int] = []
    app, watch = _durable_app(path, second, 60 - len(first))
    await watch.run_to_end(app)
    assert len(first) >= 20  # what was read when the stop came was handled too
    assert sorted(first + second) == list(range(1, 61))  # no gap, no repeat


async def test_a_resumed_consumer_of_several_keys_reads_every_key_after_the_stored_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keys.ss"
    with StreamWriter(path) as writer:
        for n in range(1, 21):
            writer.append("a" if n % 2 else "b", str(n).encode())
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)

    stream = FileStream("a", "b", durable="both").replay()
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    with StreamWriter(path) as writer:
        for n in range(21, 27):
            writer.append("b" if n % 3 else "a", str(n).encode())
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    assert seen == list(range(1, 27))


async def test_a_delivery_abandoned_without_an_outcome_is_delivered_again_after_a_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    seen: list[tuple[int, int]] = []
    run = 0
    stuck = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        seen.append((run, n))
        if run == 0 and n == 3:
            stuck.set()
            await trio.sleep_forever()  # never settles: cancelled when the drain times out

    stream = FileStream("s", durable="d").replay()
    app, _ = replay_app(path, handle, stream=stream, buffer=1, count=1)
    app.shutdown_timeout = 0.05
    async with serving(app):
        with trio.fail_after(10):
            await stuck.wait()
    run = 1
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    assert seen == [(0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (1, 5)]


async def test_a_live_consumer_that_settled_nothing_resumes_where_it_first_started(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)  # before its first start: a live consumer starts after these
    seen: list[int] = []
    app = App("first")
    app.broker(FileBroker(path)).subscriber(FileStream("s", durable="late"))(_noop)
    async with serving(app):
        pass  # it ran, read nothing, settled nothing
    write_numbers(path, 3, first=4)  # written while it was down: not to be skipped

    app, broker = file_app(path, name="second")
    done = trio.Event()

    @broker.subscriber(FileStream("s", durable="late"))
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 7:
            done.set()

    async with serving(app):
        await broker.publish("s", 7)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [4, 5, 6, 7]


async def test_a_seek_moves_the_stored_position_with_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20)
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 5 and seen.count(5) == 1:
            await ctx.seeker.seek(FilePosition.sequence(15))

    stream = FileStream("s", durable="d").replay()
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    write_numbers(path, 2, first=21)
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    assert seen == [1, 2, 3, 4, 5, *range(15, 23)]


async def test_the_position_is_stored_when_the_interval_has_passed_not_per_message(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "s.ss"
    state = tmp_path / "s.ss.consumers" / "d.json"
    app, broker = file_app(path, durable_interval=0.5, name="interval")
    handled = {n: trio.Event() for n in range(1, 5)}

    @broker.subscriber(FileStream("s", durable="d"))
    async def handle(n: int) -> None:
        handled[n].set()

    def stored() -> Any:
        return json.loads(state.read_text())["sequence"]

    async def publish(n: int) -> None:
        await broker.publish("s", n)
        await handled[n].wait()
        await trio.lowlevel.checkpoint()  # the settle follows the handler at once

    async with serving(app):
        await publish(1)
        first = stored()  # the first move is stored at once
        await publish(2)
        await publish(3)
        before_interval = stored()
        await trio.sleep(1)  # quiet: the subscription stores what moved while it waits
        after_interval = stored()
        await publish(4)
    assert (first, before_interval, after_interval, stored()) == (1, 1, 3, 4)  # 4: at close


async def test_a_stored_position_the_file_does_not_hold_fails_the_start(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    stream = FileStream("s", durable="d").replay()
    await run_to_end(replay_app(path, _noop, stream=stream)[0])
    state = tmp_path / "s.ss.consumers" / "d.json"
    state.write_text(state.read_text().replace('"sequence": 3', '"sequence": 9'))
    with pytest.RaisesGroup(
        pytest.RaisesExc(
            DurableStateError,
            match=r"consumer 'd' stopped after sequence 9 of stream 's', which this file does "
            r"not hold .*; remove .*d\.json to start over",
        ),
        flatten_subgroups=True,
    ):
        await run_to_end(replay_app(path, _noop, stream=stream)[0])


async def test_a_store_left_from_a_file_created_anew_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    StreamWriter(path, created_at_ms=1_000).close()
    write_numbers(path, 3)
    stream = FileStream("s", durable="d").replay()
    await run_to_end(replay_app(path, _noop, stream=stream)[0])
    path.unlink()
    StreamWriter(path, created_at_ms=2_000).close()
    write_numbers(path, 3)
    with pytest.RaisesGroup(
        pytest.RaisesExc(DurableStateError, match="created at 1000 ms, but .* at 2000 ms"),
        flatten_subgroups=True,
    ):
        await run_to_end(replay_app(path, _noop, stream=stream)[0])


async def test_two_subscriptions_with_one_durable_name_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    app, broker = file_app(path, name="twice")
    for name in ("one", "two"):
        broker.subscriber(FileStream("s", durable="same"), name=name)(_noop)
    with pytest.RaisesGroup(
        pytest.RaisesExc(DurableLockedError, match="'same' is already running"),
        flatten_subgroups=True,
    ):
        await run_to_end(app)
    again = App("again")  # the failed start released the lock of the first
    again.broker(FileBroker(path)).subscriber(FileStream("s", durable="same").replay())(_noop)
    await run_to_end(again)


async def _noop(n: int) -> None:
    pass


async def test_a_second_durable_consumer_of_a_file_not_created_yet_is_refused_at_its_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "later.ss"  # no writer has created it yet
    first, first_broker = file_app(path, name="first")
    first_broker.subscriber(FileStream("s", durable="same"), name="one")(_noop)
    second, second_broker = file_app(path, name="second")
    second_broker.subscriber(FileStream("s", durable="same"), name="two")(_noop)
    async with serving(first):
        with pytest.RaisesGroup(
            pytest.RaisesExc(DurableLockedError, match="'same' is already running"),
            flatten_subgroups=True,
        ):
            async with serving(second):
                pass
    # The first released its lock when it stopped, though the file never came.
    third, third_broker = file_app(path, name="third")
    third_broker.subscriber(FileStream("s", durable="same"), name="three")(_noop)
    async with serving(third):
        pass
