"""A stream file that does not exist: a replay is refused naming it, a live subscription waits
for it, and only a publish creates it (a mistyped path never turns into an empty file)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from tests.support import serving
from trio_streams import App, SeekRefused
from trio_streams.file import FilePosition, FileStream, StreamFileNotFoundError
from trio_streams.file.broker import FileTransport
from trio_streams.file.errors import StreamFileError
from trio_streams.file.reader import FileReader

from .apps import file_app, refused_at_start, write_numbers

WAITING = "does not exist yet; waiting for a writer to create it"


def replaying(path: Path, stream: FileStream | None = None) -> App:
    app, broker = file_app(path, name="replay")
    broker.subscriber(stream or FileStream("s").replay(), name="read")(_ignore)
    return app


async def _ignore(n: int) -> None: ...


async def refusal_of(app: App) -> StreamFileNotFoundError:
    return await refused_at_start(app, StreamFileNotFoundError)


async def test_a_replay_of_a_file_that_does_not_exist_is_refused_at_start_naming_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ordres.ss"  # a typo of orders.ss
    refusal = await refusal_of(replaying(path))
    assert refusal.path == str(path)
    assert str(refusal).startswith(f"{path}: no such stream file to replay")
    assert "check the path" in str(refusal)


async def test_the_refusal_is_a_stream_file_error_and_a_file_not_found_error(
    tmp_path: Path,
) -> None:
    refusal = await refusal_of(replaying(tmp_path / "missing.ss"))
    assert isinstance(refusal, StreamFileError)
    assert isinstance(refusal, FileNotFoundError)
    assert refusal.filename == str(tmp_path / "missing.ss")


async def test_no_empty_file_is_created_by_a_subscriber(tmp_path: Path) -> None:
    replayed, followed = tmp_path / "replayed.ss", tmp_path / "followed.ss"
    await refusal_of(replaying(replayed))
    app, broker = file_app(followed, name="live")
    broker.subscriber(FileStream("s"), name="follow")(_ignore)
    async with serving(app):
        pass
    assert not replayed.exists()
    assert not followed.exists()


async def test_a_replay_that_starts_elsewhere_of_a_missing_file_is_refused_too(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing.ss"
    stream = FileStream("s", start_at=FilePosition.sequence(3)).replay()
    assert (await refusal_of(replaying(path, stream))).path == str(path)
    assert not path.exists()


async def test_a_replay_in_a_directory_that_does_not_exist_is_refused_naming_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "no" / "such" / "dir" / "orders.ss"
    assert (await refusal_of(replaying(path))).path == str(path)
    assert not (tmp_path / "no").exists()


async def test_a_replay_of_a_directory_says_it_is_a_directory(tmp_path: Path) -> None:
    refusal = await refusal_of(replaying(tmp_path))
    assert "is a directory, not a stream file" in str(refusal)


async def test_a_live_tail_of_a_missing_file_logs_once_that_it_waits_then_follows_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams.file")
    path = tmp_path / "later.ss"
    seen: list[int] = []
    three = trio.Event()
    app, broker = file_app(path, name="live")

    @broker.subscriber(FileStream("s"), name="follow")
    async def follow(n: int) -> None:
        seen.append(n)
        if len(seen) == 3:
            three.set()

    with trio.fail_after(20):
        async with serving(app):
            await trio.testing.wait_all_tasks_blocked()  # the subscription waits for the file
            assert not path.exists()
            write_numbers(path, 3)  # another writer creates it
            await three.wait()
    # Everything in the file was written after the start: read from its first message.
    assert seen == [1, 2, 3]
    waiting = [r for r in caplog.records if WAITING in r.getMessage()]
    assert len(waiting) == 1, caplog.text
    assert waiting[0].levelno == logging.INFO
    assert str(path) in waiting[0].getMessage() and "follow" in waiting[0].getMessage()


async def test_the_banner_of_a_live_tail_of_a_missing_file_says_it_waits_then_reads_from_the_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    app, broker = file_app(tmp_path / "later.ss", name="live")
    broker.subscriber(FileStream("s"), name="follow")(_ignore)
    async with serving(app):
        pass
    [banner] = [r.getMessage() for r in caplog.records if "subscription 'follow'" in r.getMessage()]
    assert "waiting for the file to be created, then reading it from its first message" in banner
    assert "from the tip" not in banner


async def test_the_banner_of_a_live_tail_of_a_file_that_exists_says_it_follows_from_the_tip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    path = tmp_path / "there.ss"
    write_numbers(path, 1)
    app, broker = file_app(path, name="live")
    broker.subscriber(FileStream("s"), name="follow")(_ignore)
    async with serving(app):
        pass
    [banner] = [r.getMessage() for r in caplog.records if "subscription 'follow'" in r.getMessage()]
    assert "following from the tip" in banner


async def test_a_live_subscription_follows_the_file_its_own_app_creates_by_publishing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "own.ss"
    got = trio.Event()
    app, broker = file_app(path, name="own")

    @broker.subscriber(FileStream("s"), name="follow")
    async def follow(n: int) -> None:
        assert n == 7
        got.set()

    with trio.fail_after(20):
        async with serving(app):
            await broker.publish("s", 7)
            await got.wait()


async def test_an_app_stopped_while_its_subscription_waits_for_the_file_stops_cleanly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "never.ss"
    app, broker = file_app(path, name="live")
    broker.subscriber(FileStream("s", durable="keeper"), name="follow")(_ignore)
    with trio.fail_after(20):
        async with serving(app):
            await trio.testing.wait_all_tasks_blocked()
    assert not path.exists()
    assert not (tmp_path / "never.ss.consumers").exists()


async def test_a_durable_live_consumer_of_a_missing_file_starts_at_its_first_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "later.ss"
    seen: list[int] = []
    two = trio.Event()
    app, broker = file_app(path, name="durable", durable_interval=0)

    @broker.subscriber(FileStream("s", durable="keeper"), name="follow")
    async def follow(n: int) -> None:
        seen.append(n)
        if len(seen) == 2:
            two.set()

    with trio.fail_after(20):
        async with serving(app):
            await trio.testing.wait_all_tasks_blocked()
            write_numbers(path, 2)
            await two.wait()
    assert seen == [1, 2]
    assert (tmp_path / "later.ss.consumers" / "keeper.json").exists()


async def test_a_seek_while_the_file_does_not_exist_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "later.ss"
    transport = FileTransport(str(path))
    subscription = transport.open_subscription(FileStream("s"), {}, label="follow")
    try:
        with pytest.raises(SeekRefused, match=r"follow: .*later\.ss does not exist yet"):
            await subscription.seek(FilePosition.end())
        assert subscription.lag() is None
    finally:
        await transport.aclose()
    assert not path.exists()


async def test_publishing_creates_the_file_with_the_brokers_beacon_interval(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.ss"
    app, broker = file_app(path, name="create", beacon_interval=4096)
    async with serving(app):
        assert not path.exists()  # connecting creates nothing
        await broker.publish("orders", 1)
    with FileReader(path) as reader:
        assert reader.header.beacon_interval == 4096
        assert reader.header.file_name == "new.ss"
        assert [m.seq for m in reader] == [1]
