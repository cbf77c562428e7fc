"""Many writers, one stream file, in one process: each append takes the lock and catches up.

Every test checks the file against the oracle: decoded, then encoded again by the project's own
encoder as one writer, it must come out byte for byte the same.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from trio_streams.file.errors import UnprovenTailError
from trio_streams.file.format import HEADER_SIZE
from trio_streams.file.lock import hold_exclusively
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .many_writers import reencoded


def _decoded(path: Path) -> list[tuple[str, int, bytes]]:
    with FileReader(path, internal=True, on_eos="include") as reader:
        out = [(m.stream_key, m.seq, m.payload) for m in reader]
        reader.check_finished()
    return out


def _dense(path: Path) -> None:
    seqs: dict[str, list[int]] = {}
    for key, seq, _ in _decoded(path):
        if key != "SEA_STREAMER_INTERNAL":
            seqs.setdefault(key, []).append(seq)
    for key, got in seqs.items():
        assert got == list(range(1, len(got) + 1)), key


@pytest.mark.parametrize("interval", [128, 1024, 4096])
def test_interleaved_writers_make_the_file_one_writer_would_have_made(
    tmp_path: Path, interval: int
) -> None:
    path = tmp_path / "many.ss"
    rng = random.Random(interval)
    writers = [StreamWriter(path, beacon_interval=interval) for _ in range(3)]
    written: list[list[bytes]] = [[] for _ in writers]
    for step in range(400):
        w = rng.randrange(len(writers))
        for _ in range(rng.randint(1, 6)):
            size = rng.choice([0, 3, 40, 300, interval * 2])
            payload = f"{w}:{step}:".encode() + bytes(size)
            writers[w].append(rng.choice(["a", "bb", "c-1", "d.x"]), payload)
            written[w].append(payload)
        writers[w].flush()
    for writer in writers:
        writer.close()
    assert path.read_bytes() == reencoded(path)
    _dense(path)
    for w, payloads in enumerate(written):  # each writer's messages, in its order, once
        mine = [p for _, _, p in _decoded(path) if p.startswith(f"{w}:".encode())]
        assert mine == payloads


def test_buffered_messages_are_numbered_after_what_another_writer_appended(
    tmp_path: Path,
) -> None:
    path = tmp_path / "renumber.ss"
    first, second = StreamWriter(path, beacon_interval=1024), StreamWriter(path)
    provisional = first.append("k", b"first")
    assert provisional[0] == 1
    assert second.publish("k", b"second").seq == 1
    first.flush()
    assert first.last_seq("k") == 2
    receipt = first.publish("k", b"third")
    assert (receipt.seq, receipt.position.value) == (3, 3)
    first.close()
    second.close()
    assert [(seq, p) for _, seq, p in _decoded(path)] == [
        (1, b"second"),
        (2, b"first"),
        (3, b"third"),
    ]
    assert path.read_bytes() == reencoded(path)


def test_an_end_of_stream_another_writer_closed_with_is_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "eos.ss"
    staying = StreamWriter(path, beacon_interval=128)
    staying.publish("k", b"1")
    leaving = StreamWriter(path)
    leaving.publish("k", b"2")
    leaving.close(eos=True)
    assert _decoded(path)[-1][2] == b"EOS"
    staying.publish("k", b"3")
    staying.close()
    assert [p for _, _, p in _decoded(path)] == [b"1", b"2", b"3"]
    assert path.read_bytes() == reencoded(path)


def test_the_last_writer_to_close_with_eos_ends_the_file(tmp_path: Path) -> None:
    path = tmp_path / "end.ss"
    one, two = StreamWriter(path, beacon_interval=1024), StreamWriter(path)
    one.publish("k", b"a")
    one.close(eos=True)
    two.publish("k", b"b")
    two.close(eos=True)
    assert [p for _, _, p in _decoded(path)] == [b"a", b"b", b"EOS"]
    assert path.read_bytes() == reencoded(path)


def test_a_tail_cut_by_a_crashed_writer_is_truncated_and_the_file_continued(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cut.ss"
    survivor = StreamWriter(path, beacon_interval=1024)
    survivor.publish("k", b"before")
    crashed = StreamWriter(path)
    for n in range(20):
        crashed.append("k", b"lost %d" % n + bytes(100))
    crashed._sync(os.fstat(crashed._fd).st_size)
    crashed._encode_pending()
    data = crashed._encoder.take()
    good = path.stat().st_size
    os.pwrite(crashed._fd, data[: len(data) // 2 + 7], crashed._encoder.committed_offset)
    os.close(crashed._fd)  # its process died: no flush, no close
    receipt = survivor.publish("k", b"after")
    survivor.close()
    messages = _decoded(path)
    assert messages[0][2] == b"before" and messages[-1][2] == b"after"
    kept = [p for _, _, p in messages if p.startswith(b"lost")]
    assert receipt.seq == len(messages)
    assert receipt.offset > good  # whole frames of the crashed writer stay
    assert len(kept) < 20
    assert path.read_bytes() == reencoded(path)
    _dense(path)


def test_a_tail_that_is_not_provably_cut_is_refused_and_the_file_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "damaged.ss"
    writer = StreamWriter(path, beacon_interval=1 << 20)
    writer.publish("k", b"fine")
    other = StreamWriter(path)
    other.publish("k", b"x" * 200)
    other.close()
    data = bytearray(path.read_bytes())
    size_field = len(data) - 203 - 4  # the second frame's payload size
    data[size_field] ^= 0x01  # now it claims 16 MiB more than the file holds
    path.write_bytes(data)
    writer.append("k", b"never written")
    with pytest.raises(UnprovenTailError) as error:
        writer.flush()
    assert "repair" in " ".join(getattr(error.value, "__notes__", [])) + str(error.value)
    assert path.read_bytes() == data
    os.close(writer._fd)


def test_the_first_flush_after_opening_continues_after_later_appends(tmp_path: Path) -> None:
    path = tmp_path / "late.ss"
    early = StreamWriter(path, beacon_interval=128)
    for n in range(30):
        with StreamWriter(path) as other:
            other.publish(f"k{n % 4}", b"%d" % n)
    early.append("k0", b"mine")
    early.close()
    assert early.last_seq("k0") == 9
    assert path.read_bytes() == reencoded(path)


def test_a_reopened_file_continues_the_beacons_round_robin(tmp_path: Path) -> None:
    path = tmp_path / "rr.ss"
    for n in range(60):
        with StreamWriter(path, beacon_interval=571) as writer:  # one marker per beacon
            writer.publish(f"key{n % 5}", bytes(90))
    assert path.read_bytes() == reencoded(path)


async def test_two_brokers_in_one_process_publish_concurrently(tmp_path: Path) -> None:
    from tests.support import serving

    from .apps import file_app

    path = tmp_path / "brokers.ss"
    one_app, one = file_app(path, name="one", beacon_interval=1024)
    two_app, two = file_app(path, name="two")
    separate = StreamWriter(path)  # its own open: appends contend for the lock with the apps'

    async def publish(broker: object, tag: str) -> None:
        for n in range(200):
            await broker.publish("orders", f"{tag}{n}")  # type: ignore[attr-defined]

    async with serving(one_app), serving(two_app), trio.open_nursery() as nursery:
        nursery.start_soon(publish, one, "a")
        nursery.start_soon(publish, two, "b")
        for n in range(50):
            separate.publish("orders", b"c%d" % n)
            await trio.lowlevel.checkpoint()
    separate.close()
    _dense(path)
    assert len(_decoded(path)) == 450
    assert path.read_bytes() == reencoded(path)


async def test_a_publish_waiting_for_the_lock_goes_through_once_it_is_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "wait.ss"
    writer = StreamWriter(path, beacon_interval=1024)
    fd = os.open(path, os.O_RDONLY)
    lock = hold_exclusively(fd, str(path))
    done = trio.Event()
    receipts = []

    async def publish() -> None:
        receipts.append(await writer.apublish("k", b"waited"))
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publish)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set() and os.fstat(fd).st_size == HEADER_SIZE
        os.close(lock)
    os.close(fd)
    await writer.aclose()
    assert receipts[0].seq == 1
    assert [p for _, _, p in _decoded(path)] == [b"waited"]


async def test_a_publish_cancelled_while_it_waits_for_the_lock_appends_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cancel.ss"
    writer = StreamWriter(path, beacon_interval=1024)
    fd = os.open(path, os.O_RDONLY)
    lock = hold_exclusively(fd, str(path))
    with trio.move_on_after(0.05) as scope:
        await writer.apublish("k", b"cancelled")
    assert scope.cancelled_caught
    os.close(lock)
    os.close(fd)
    # The abandoned wait let go of the lock: others get it, and nothing was appended.
    with StreamWriter(path) as other:
        assert other.publish("k", b"next").seq == 1
    assert (await writer.apublish("k", b"after")).seq == 2
    await writer.aclose()
    assert [p for _, _, p in _decoded(path)] == [b"next", b"after"]


async def test_messages_appended_while_a_flush_waits_for_the_lock_keep_their_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "order.ss"
    writer, other = StreamWriter(path, beacon_interval=1024), StreamWriter(path)
    writer.append("k", b"1")
    other.publish("k", b"x")
    writer.flush()  # it had to catch up: it now buffers unencoded
    writer.append("k", b"2")
    fd = os.open(path, os.O_RDONLY)
    lock = hold_exclusively(fd, str(path))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.aflush)
        await trio.testing.wait_all_tasks_blocked()
        writer.append("k", b"3")  # while the flush waits
        other.append("k", b"y")  # buffered by the other writer, flushed after
        os.close(lock)
    os.close(fd)
    other.flush()
    writer.append("k", b"4")
    writer.close()
    other.close()
    assert [p for _, _, p in _decoded(path)] == [b"x", b"1", b"2", b"3", b"y", b"4"]
    _dense(path)
    assert path.read_bytes() == reencoded(path)


def test_a_writer_alone_again_encodes_on_append(tmp_path: Path) -> None:
    path = tmp_path / "alone.ss"
    writer = StreamWriter(path, beacon_interval=1024)
    with StreamWriter(path) as other:
        other.publish("k", b"x")
    writer.append("k", b"1")
    writer.flush()  # caught up
    assert writer.append("k", b"2")[0] == 3
    writer.flush()  # nobody else wrote
    seq, _, offset = writer.append("k", b"3")
    assert (seq, offset) == (4, writer.offset - 34)
    writer.close()
    assert [p for _, _, p in _decoded(path)] == [b"x", b"1", b"2", b"3"]


async def test_a_durable_consumer_resumes_while_another_writer_keeps_appending(
    tmp_path: Path,
) -> None:
    from .apps import write_numbers
    from .test_durable import _durable_app

    path = tmp_path / "s.ss"
    write_numbers(path, 30)
    other = StreamWriter(path)

    async def feed(first: int, last: int) -> None:
        for n in range(first, last + 1):
            assert other.publish("s", b"%d" % n).seq == n
            await trio.lowlevel.checkpoint()

    first: list[int] = []
    app, watch = _durable_app(path, first, 40)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed, 31, 60)
        await watch.run_to_end(app)
    second: list[int] = []
    app, watch = _durable_app(path, second, 90 - len(first))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed, 61, 90)
        await watch.run_to_end(app)
    other.close()
    assert sorted(first + second) == list(range(1, 91))  # no gap, no repeat


def test_opening_while_another_writer_holds_the_lock_counts_the_rest_at_the_first_flush(
    tmp_path: Path,
) -> None:
    path = tmp_path / "open.ss"
    with StreamWriter(path, beacon_interval=128) as first:
        first.publish("k", b"1")
    closing = StreamWriter(path)
    closing.publish("k", b"2")
    closing.close(eos=True)  # the file ends with an end-of-stream message
    fd = os.open(path, os.O_RDONLY)
    lock = hold_exclusively(fd, str(path))
    writer = StreamWriter(path)  # does not wait for the lock
    os.close(lock)
    os.close(fd)
    assert writer.publish("k", b"3").seq == 3
    writer.close()
    assert [p for _, _, p in _decoded(path)] == [b"1", b"2", b"3"]
    assert path.read_bytes() == reencoded(path)


@pytest.mark.parametrize("interval", [128, 1024, 1 << 20])
def test_frames_built_before_the_lock_and_numbered_under_it_are_those_one_writer_makes(
    tmp_path: Path, interval: int
) -> None:
    """Writers that take turns build their frames as messages are appended, with provisional
    sequence numbers, and number them under the lock: batches of one key (in bulk, when no
    beacon falls among them) and of several, with frames that cross boundaries."""
    path = tmp_path / "ahead.ss"
    rng = random.Random(interval)
    writers = [StreamWriter(path, beacon_interval=interval) for _ in range(3)]
    for step in range(300):
        writer = writers[step % 3]
        keys = ["one"] if rng.random() < 0.6 else ["one", "two", "three"]
        for _ in range(rng.randint(1, 40)):
            writer.append(rng.choice(keys), bytes(rng.choice([0, 5, 90, interval // 3])))
        writer.flush()
    for writer in writers:
        writer.close()
    assert path.read_bytes() == reencoded(path)
    _dense(path)
