"""A replay of a stream key the file holds no message of is refused at start, listing the keys
it holds, closest first, unless the app publishes to that key itself; a live tail of it waits.

The check reads beacons before messages, and never refuses a key that has a message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.support import serving
from trio_streams import App
from trio_streams.core.names import NameNotFound
from trio_streams.file import FilePosition, FileStream, StreamKeyNotFoundError
from trio_streams.file.keys import check_file_keys
from trio_streams.file.writer import StreamWriter

from .apps import file_app, refused_at_start


def _file(path: Path, *keys: str) -> Path:
    """A file holding one message of each of ``keys``, in order."""
    return _runs(path, *((key, 1) for key in keys))


def _runs(path: Path, *runs: tuple[str, int], beacon_interval: int = 1024) -> Path:
    """A file holding, for each (key, count) in turn, ``count`` messages of 100 bytes."""
    with StreamWriter(path, beacon_interval=beacon_interval) as writer:
        for key, count in runs:
            for _ in range(count):
                writer.append(key, b"1".ljust(100))
    return path


async def _ignore(n: int) -> None: ...


async def _refusal_of(app: App) -> StreamKeyNotFoundError:
    return await refused_at_start(app, StreamKeyNotFoundError)


async def test_a_replay_of_a_key_the_file_does_not_hold_is_refused_at_start_listing_the_keys_there(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "shop.ss", "audit", "orders", "orders.dead")
    app, broker = file_app(path, name="tk")
    handled: list[int] = []

    @broker.subscriber(FileStream("order").replay(), name="h")
    async def h(n: int) -> None:
        handled.append(n)

    refusal = await _refusal_of(app)
    assert str(refusal) == (
        f"h: cannot replay: no stream key 'order' in {path}; "
        "there: 'orders', 'orders.dead', 'audit'"
    )
    assert refusal.missing == ("order",)
    assert refusal.path == str(path)
    assert isinstance(refusal, NameNotFound)
    assert handled == []


async def test_a_replay_of_several_keys_names_the_ones_that_are_not_there(tmp_path: Path) -> None:
    path = _file(tmp_path / "shop.ss", "orders", "audit")
    app, broker = file_app(path)
    broker.subscriber(FileStream("orders", "adit", "x").replay(), name="h")(_ignore)
    refusal = await _refusal_of(app)
    assert refusal.missing == ("adit", "x")
    assert "no stream keys 'adit', 'x'" in str(refusal)
    assert str(refusal).endswith("there: 'audit', 'orders'")


async def test_a_replay_that_starts_elsewhere_of_a_key_not_there_is_refused_too(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    app, broker = file_app(path)
    stream = FileStream("order", start_at=FilePosition.sequence(1)).replay()
    broker.subscriber(stream, name="h")(_ignore)
    assert (await _refusal_of(app)).missing == ("order",)


async def test_the_run_command_refuses_the_typo_in_one_line_and_exits_1(tmp_path: Path) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    (tmp_path / "typo_key.py").write_text(
        textwrap.dedent(
            f"""
            from trio_streams import App
            from trio_streams.file import FileBroker, FileStream

            app = App("tk")
            log = app.broker(FileBroker({str(path)!r}))

            @log.subscriber(FileStream("order").replay())
            async def h(m: dict) -> None:
                print("got", m)
            """
        )
    )
    result = cli("run", "typo_key:app", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    [line] = [line for line in stderr_lines(result) if line.startswith("trio-streams run")]
    assert f"no stream key 'order' in {path}; there: 'orders'" in line


async def test_a_replay_of_a_key_the_app_publishes_to_is_allowed_before_it_holds_any(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    app, broker = file_app(path)
    totals: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").replay(), name="sum")
    @broker.publisher("totals")
    async def total(n: int) -> int:
        return n * 10

    @broker.subscriber(FileStream("totals").replay(), name="totals")
    async def read_totals(n: int) -> None:
        totals.append(n)
        done.set()

    with trio.fail_after(20):
        async with serving(app):
            await done.wait()
    assert totals == [10]


async def test_a_replay_of_the_apps_own_dead_letter_key_is_allowed_before_it_holds_any(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    app, broker = file_app(path)
    broker.subscriber(FileStream("orders").replay(), name="h", dead_letter="orders.dead")(_ignore)
    broker.subscriber(FileStream("orders.dead").replay(), name="dead")(_ignore)
    with trio.fail_after(20):
        async with serving(app):
            pass


async def test_a_replay_of_a_key_another_app_publishes_to_is_still_refused(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    _, writer_broker = file_app(path, name="writer")
    writer_broker.publisher("totals")
    app, broker = file_app(path)
    broker.subscriber(FileStream("totals").replay(), name="h")(_ignore)
    assert (await _refusal_of(app)).missing == ("totals",)


async def test_a_live_tail_of_a_key_not_yet_in_the_file_is_not_refused(tmp_path: Path) -> None:
    path = _file(tmp_path / "shop.ss", "orders")
    app, broker = file_app(path)
    seen: list[int] = []
    got = trio.Event()

    @broker.subscriber(FileStream("order"), name="h")
    async def h(n: int) -> None:
        seen.append(n)
        got.set()

    with trio.fail_after(20):
        async with serving(app):
            await trio.testing.wait_all_tasks_blocked()
            with StreamWriter(path) as writer:
                writer.append("order", b"7")
            await got.wait()
    assert seen == [7]


# ---- the check: cheap when the key is there, never wrong -----------------------------------


def test_a_key_named_by_a_beacon_is_found_without_decoding_the_messages(tmp_path: Path) -> None:
    path = _runs(tmp_path / "big.ss", ("a", 200), ("late", 1), ("a", 30))
    # Damage a payload near the start: decoding the messages would stop there.
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF
    path.write_bytes(bytes(data))
    check_file_keys(path, ["late", "a"])


def test_a_key_written_after_the_last_beacon_is_found(tmp_path: Path) -> None:
    check_file_keys(_runs(tmp_path / "f.ss", ("a", 50), ("tail", 1)), ["tail"])


def test_every_key_there_is_found_when_beacons_rotate_among_more_keys_than_they_hold(
    tmp_path: Path,
) -> None:
    keys = [f"k{n:02d}" for n in range(60)]
    path = _runs(tmp_path / "f.ss", *[(key, 1) for _ in range(5) for key in keys])
    for key in keys:
        check_file_keys(path, [key])
    with pytest.raises(NameNotFound, match="no stream key 'k60'"):
        check_file_keys(path, ["k60"])


def test_a_file_whose_beacons_carry_no_markers_is_read_for_its_keys(tmp_path: Path) -> None:
    path = _runs(tmp_path / "f.ss", ("a", 40), ("b", 1), beacon_interval=128)
    check_file_keys(path, ["b", "a"])
    with pytest.raises(NameNotFound, match="there: 'a', 'b'"):
        check_file_keys(path, ["c"])
