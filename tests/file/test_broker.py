"""FileBroker: creating the file, publishing, headers on the wire, settling, mount-time refusals."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import serving
from trio_streams import (
    RETRY_COUNT_HEADER,
    RETRY_TARGET_HEADER,
    App,
    ConfigurationError,
    Context,
    Headers,
    MemoryStream,
    Router,
    SeekRefused,
    UnsupportedError,
    ack,
    retry,
    retry_after,
)
from trio_streams.core.process import process_name
from trio_streams.file import (
    FileBroker,
    FilePosition,
    FileStream,
    StreamFileNotFoundError,
)
from trio_streams.file.envelope import open_envelope
from trio_streams.file.format import Message
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .apps import file_app, replay_app, run_to_end, write_numbers


@dataclass
class Order:
    id: int
    amount: float


def messages_in(path: Path, *keys: str) -> list[Message]:
    with FileReader(path, keys=keys or None) as reader:
        return list(reader)


# ---- the file -------------------------------------------------------------------------------


async def test_existing_only_refuses_a_missing_file_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.ss"
    app = App("existing")
    app.broker(FileBroker(path, existing_only=True))
    with pytest.RaisesGroup(
        pytest.RaisesExc(StreamFileNotFoundError, match=r"missing\.ss: no such stream file"),
        flatten_subgroups=True,
    ) as error:
        async with serving(app):
            pass  # pragma: no cover - connecting fails
    [refusal] = error.value.exceptions
    assert isinstance(refusal, StreamFileNotFoundError) and refusal.path == str(path)
    assert not path.exists()


# ---- publishing -----------------------------------------------------------------------------


async def test_publish_appends_flushes_and_returns_the_position_of_the_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.ss"
    app, broker = file_app(path, name="publish")
    async with serving(app):
        first = await broker.publish("orders", Order(1, 9.5))
        other = await broker.publish("refunds", Order(2, 1.0))
        second = await broker.publish("orders", Order(3, 2.0))
        # Visible to any reader as soon as publish returns.
        assert [m.seq for m in messages_in(path, "orders")] == [1, 2]
    assert first == FilePosition.sequence(1, stream="orders")
    assert other == FilePosition.sequence(1, stream="refunds")
    assert second == FilePosition.sequence(2, stream="orders")


async def test_a_payload_without_headers_is_written_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "p.ss"
    app, broker = file_app(path, name="verbatim")
    async with serving(app):
        await broker.publish("orders", Order(1, 9.5))
        await broker.publish("orders", b"\x00raw bytes\xff")
    assert [m.payload for m in messages_in(path)] == [
        b'{"id":1,"amount":9.5}',
        b"\x00raw bytes\xff",
    ]


async def test_headers_travel_in_the_envelope_and_arrive_as_they_were_sent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.ss"
    app, broker = file_app(path, name="headers")
    got: list[tuple[Order, dict[str, str]]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders"))
    async def handle(order: Order, headers: Headers) -> None:
        got.append((order, dict(headers)))
        if len(got) == 3:
            done.set()

    sent = [
        {"trace-id": "abc", "content-type": "application/json"},
        {"needs rs2:": " padded "},
        {},
    ]
    async with serving(app):
        for n, headers in enumerate(sent):
            await broker.publish("orders", Order(n, 1.0), headers=headers)
        with trio.fail_after(10):
            await done.wait()
    assert got == [(Order(n, 1.0), headers) for n, headers in enumerate(sent)]
    written = [m.payload for m in messages_in(path)]
    assert [w[:4] for w in written] == [b"rs1:", b"rs2:", b'{"id']
    assert open_envelope(written[0]) == (b'{"id":0,"amount":1.0}', sent[0])


async def test_a_payload_that_looks_like_an_envelope_arrives_intact(tmp_path: Path) -> None:
    path = tmp_path / "e.ss"
    tricky = [b"rs1:AAAAAA==", b"rs2:", b"rs1:not base64 at all"]
    app, broker = file_app(path, name="tricky")
    async with serving(app):
        for payload in tricky:
            await broker.publish("raw", payload)
    # Written enveloped, so no reader takes them for envelopes...
    assert all(m.payload != p for m, p in zip(messages_in(path), tricky, strict=True))
    got: list[tuple[bytes, int]] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        got.append((payload, len(ctx.headers)))

    await run_to_end(replay_app(path, handle, stream=FileStream("raw").replay())[0])
    # ...and delivered exactly as they were published, with no headers.
    assert got == [(p, 0) for p in tricky]


async def test_a_malformed_envelope_written_by_another_producer_is_a_headerless_payload(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.ss"
    written = [b"rs1:!!!!", b"rs2:AAAA", b"rs1:AAAABWE6IDEKaGVsbG8="]
    with StreamWriter(path) as writer:
        for payload in written:
            writer.append("raw", payload)
    got: list[tuple[bytes, dict[str, str]]] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        got.append((payload, dict(ctx.headers)))

    await run_to_end(replay_app(path, handle, stream=FileStream("raw").replay())[0])
    assert got == [(written[0], {}), (written[1], {}), (b"hello", {"a": "1"})]


async def test_publishers_of_one_file_in_one_process_share_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "shared.ss"
    app = App("shared")
    one = app.broker(FileBroker(path))
    two = app.broker(FileBroker(path))
    async with serving(app):
        receipts = [await broker.publish("k", n) for n in range(4) for broker in (one, two)]
    assert [r.value for r in receipts] == list(range(1, 9))
    assert [m.payload for m in messages_in(path)] == [b"%d" % (i // 2) for i in range(8)]


async def test_publishing_while_another_writer_has_the_file_open_continues_its_numbers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.ss"
    app, broker = file_app(path, name="shared")
    with StreamWriter(path) as other:  # another open of the file: as good as another process
        other.publish("k", b"theirs")
        async with serving(app):
            mine = await broker.publish("k", 1)
            other.publish("k", b"theirs again")
            again = await broker.publish("k", 2)
    assert (mine.value, again.value) == (2, 4)
    assert [m.seq for m in messages_in(path)] == [1, 2, 3, 4]


async def test_end_with_eos_ends_the_file_and_replays_end_there(tmp_path: Path) -> None:
    path = tmp_path / "eos.ss"
    app, broker = file_app(path, end_with_eos=True, name="eos")
    async with serving(app):
        await broker.publish("s", 1)
        await broker.publish("s", 2)
    with FileReader(path, on_eos="stop") as reader:
        assert [m.seq for m in reader] == [1, 2]
        assert reader.eos is not None
    write_numbers(path, 1, first=3)  # a writer reopening the file overwrites the end marker
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)

    await run_to_end(replay_app(path, handle)[0])
    assert seen == [1, 2, 3]


async def test_a_broker_that_did_not_publish_writes_no_end_of_stream(tmp_path: Path) -> None:
    path = tmp_path / "quiet.ss"
    write_numbers(path, 2)
    size = path.stat().st_size
    app = App("quiet")
    app.broker(FileBroker(path, end_with_eos=True))
    async with serving(app):
        pass
    assert path.stat().st_size == size


# ---- reading --------------------------------------------------------------------------------


async def test_several_keys_are_read_in_the_order_they_were_written(tmp_path: Path) -> None:
    path = tmp_path / "keys.ss"
    app, broker = file_app(path, name="keys")
    got: list[tuple[str, FilePosition | None, str]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("a", "b"))
    async def handle(text: str, ctx: Context) -> None:
        got.append((ctx.stream, ctx.position, text))
        if len(got) == 4:
            done.set()

    async with serving(app):
        for key, text in [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("b", "b2")]:
            await broker.publish(key, text)
        with trio.fail_after(10):
            await done.wait()
    assert got == [
        ("a", FilePosition.sequence(1, stream="a"), "a1"),
        ("b", FilePosition.sequence(1, stream="b"), "b1"),
        ("a", FilePosition.sequence(2, stream="a"), "a2"),
        ("b", FilePosition.sequence(2, stream="b"), "b2"),
    ]


async def test_start_at_starts_a_live_subscription_elsewhere_and_it_then_follows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "start.ss"
    write_numbers(path, 5)
    app, broker = file_app(path, name="start")
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("s", start_at=FilePosition.sequence(4)))
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 6:
            done.set()

    async with serving(app):
        await broker.publish("s", 6)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [4, 5, 6]


async def test_a_start_position_the_file_does_not_hold_fails_the_start(tmp_path: Path) -> None:
    path = tmp_path / "start.ss"
    write_numbers(path, 5)
    app, broker = file_app(path, name="start")
    broker.subscriber(FileStream("s", start_at=FilePosition.sequence(9)).replay(), name="late")(
        _noop
    )
    with pytest.RaisesGroup(
        pytest.RaisesExc(
            SeekRefused, match=r"late: start_at Position.sequence\(9\) refused in .*start.ss"
        ),
        flatten_subgroups=True,
    ):
        async with serving(app):
            pass  # pragma: no cover - starting fails


async def _noop(n: int) -> None:
    pass


async def test_a_broker_prefix_is_put_in_front_of_every_key(tmp_path: Path) -> None:
    path = tmp_path / "prefix.ss"
    app, broker = file_app(path, prefix="shop.", name="prefix")
    router = Router(prefix="eu.")
    seen: list[str] = []
    done = trio.Event()

    @router.subscriber(FileStream("orders"))
    async def handle(text: str, ctx: Context) -> None:
        seen.append(ctx.stream)
        done.set()

    broker.include_router(router)
    async with serving(app):
        await broker.publish("shop.eu.orders", "x")
        with trio.fail_after(10):
            await done.wait()
    assert seen == ["shop.eu.orders"]


# ---- settling -------------------------------------------------------------------------------


async def test_retry_appends_a_copy_with_the_retry_count_header(tmp_path: Path) -> None:
    path = tmp_path / "retry.ss"
    write_numbers(path, 1)
    attempts: list[tuple[int, FilePosition | None]] = []

    async def handle(n: int, ctx: Context) -> Any:
        attempts.append((ctx.attempt, ctx.position))
        return retry() if ctx.attempt < 3 else None

    await run_to_end(replay_app(path, handle)[0])
    assert attempts == [(k, FilePosition.sequence(k, stream="s")) for k in (1, 2, 3)]
    copies = [open_envelope(m.payload) for m in messages_in(path)[1:]]
    # <app>/<subscription>@<this process>: a replica of the app elsewhere passes over it.
    target = {RETRY_TARGET_HEADER: f"file/sub@{process_name()}"}
    assert copies == [
        (b"1", {RETRY_COUNT_HEADER: "1", **target}),
        (b"1", {RETRY_COUNT_HEADER: "2", **target}),
    ]
    assert process_name().startswith(f"{socket.gethostname()}-{os.getpid()}-")


async def test_spent_retries_are_dead_lettered_to_their_key_as_they_arrived(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dead.ss"
    app, broker = file_app(path, name="dead")
    done = trio.Event()

    @broker.subscriber(FileStream("orders"), max_attempts=2, dead_letter="orders.dead")
    async def handle(order: Order, ctx: Context) -> None:
        if ctx.attempt == 2:
            done.set()
        raise ValueError("cannot handle")

    async with serving(app):
        await broker.publish("orders", Order(7, 1.0), headers={"trace-id": "t7"})
        with trio.fail_after(10):
            await done.wait()
    [dead] = messages_in(path, "orders.dead")
    payload, headers = open_envelope(dead.payload)
    assert payload == b'{"id":7,"amount":1.0}'
    # As it arrived, less the retry count and target (the attempts are said apart), plus why.
    assert headers["trace-id"] == "t7"
    assert RETRY_COUNT_HEADER not in headers and RETRY_TARGET_HEADER not in headers
    assert headers["x-dead-letter-attempts"] == "2"
    assert headers["x-dead-letter-reason"] == "max-attempts"
    assert headers["x-dead-letter-error"] == "ValueError: cannot handle"


async def test_retry_after_appends_the_copy_after_the_delay(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "later.ss"
    write_numbers(path, 1)
    app, _ = replay_app(path, _retry_once_after_a_minute)
    copies: list[tuple[float, int]] = []
    async with serving(app):
        start = trio.current_time()
        for wait in (59.0, 2.0):
            await trio.sleep(wait)
            copies.append((trio.current_time() - start, len(messages_in(path))))
    assert copies == [(59.0, 1), (61.0, 2)]


async def _retry_once_after_a_minute(n: int, ctx: Context) -> Any:
    return retry_after(60) if ctx.attempt == 1 else None


# ---- what is refused before anything runs ---------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FileStream(), "at least one stream name"),
        (lambda: FileStream("a b"), "not valid in a stream file"),
        (lambda: FileStream("x" * 250), "not valid in a stream file"),
        (lambda: FileStream("caf\u00e9"), "not valid in a stream file"),
        (lambda: FileStream("SEA_STREAMER_INTERNAL"), "reserved"),
        (lambda: FileStream("SEA_STREAMER_WILDCARD"), "reserved"),
        (lambda: FileStream("a", "a"), "repeat"),
        (lambda: FileStream("a", start_at=5), "takes a Position"),  # type: ignore[arg-type]
        (lambda: FileStream("a", durable="../up"), "durable consumer name"),
        (lambda: FileStream("a", durable=".hidden"), "durable consumer name"),
        (lambda: FileBroker("x.ss", durable_interval=-1), "durable_interval"),
    ],
)
def test_what_a_stream_file_cannot_hold_is_refused_when_declared(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


def test_what_the_file_transport_cannot_do_is_refused_at_mount_time(tmp_path: Path) -> None:
    broker = FileBroker(tmp_path / "m.ss")
    with pytest.raises(UnsupportedError, match="reads FileStream"):
        broker.subscriber(MemoryStream("s"))(_noop)
    with pytest.raises(UnsupportedError, match=r"does not understand subscriber option\(s\)"):
        broker.subscriber(FileStream("s"), group="g")(_noop)
    with pytest.raises(ConfigurationError, match="count must be an int >= 1"):
        broker.subscriber(FileStream("s"), count=0)(_noop)
    with pytest.raises(ConfigurationError, match="not valid in a stream file"):
        broker.subscriber(FileStream("s").with_prefix("bad prefix "))(_noop)


async def test_publishing_to_a_key_the_file_cannot_hold_is_refused(tmp_path: Path) -> None:
    app, broker = file_app(tmp_path / "k.ss", name="bad")
    async with serving(app):
        with pytest.raises(ConfigurationError, match="not valid in a stream file"):
            await broker.publish("no spaces", 1)
        with pytest.raises(ConfigurationError, match="reserved"):
            await broker.publish("SEA_STREAMER_INTERNAL", 1)


# ---- the same app, in process ---------------------------------------------------------------


def test_a_file_stream_runs_in_process_as_the_memory_stream_of_the_same_keys() -> None:
    start = FilePosition.sequence(3, stream="a")
    assert FileStream("a", "b", start_at=start, durable="d").replay().in_process() == (
        MemoryStream("a", "b", start_at=start).replay()
    )
    assert FileStream("a").in_process() == MemoryStream("a")


async def test_app_test_runs_a_file_app_without_touching_a_file(tmp_path: Path) -> None:
    path = tmp_path / "never.ss"
    app, broker = file_app(path, existing_only=True, name="in-process")

    @broker.subscriber(FileStream("orders"))
    async def handle(order: Order, ctx: Context) -> Any:
        return retry() if ctx.attempt == 1 else None

    async with app.test() as t:
        await t.publish("orders", Order(1, 2.0))
        assert t.handler(handle).outcomes == [retry(), ack()]
        assert t.handler(handle).messages == [Order(1, 2.0), Order(1, 2.0)]
    assert not path.exists()
