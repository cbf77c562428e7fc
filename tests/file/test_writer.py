"""The writer: reopening continues correctly, writers take turns at the lock, sharing."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trio_streams.file.errors import FileRemovedError, WriterClosedError, WriterLockedError
from trio_streams.file.format import Message
from trio_streams.file.lock import hold_exclusively
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter, WriterRegistry

from .conftest import ALL_SS


def _messages(path: Path, **options: object) -> list[Message]:
    with FileReader(path, **options) as reader:  # type: ignore[arg-type]
        return list(reader)


def test_append_assigns_per_key_sequences_and_offsets(tmp_path: Path) -> None:
    path = tmp_path / "orders.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        receipts = [writer.append(key, b"x" * 50, 1000 + i) for i, key in enumerate("abab")]
    assert [r[0] for r in receipts] == [1, 1, 2, 2]
    assert [(m.seq, m.offset) for m in _messages(path)] == [(r[0], r[2]) for r in receipts]


def test_reopening_continues_sequences_and_beacons(tmp_path: Path) -> None:
    path = tmp_path / "log.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        for i in range(30):
            writer.append("a" if i % 3 else "b", bytes(60), 5 + i)
    reopened = StreamWriter(path)
    assert reopened.last_seq("a") == 20
    assert reopened.append("a", b"more")[0] == 21
    reopened.close()
    # One session writing everything gives the same beacons (apart from round-robin order,
    # which restarts; with a single marker slot at 1024 the bytes differ only there).
    messages = _messages(path)
    assert [m.seq for m in messages if m.stream_key == "a"] == list(range(1, 22))


def test_reopening_truncates_a_cut_frame(tmp_path: Path) -> None:
    path = tmp_path / "cut.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        for i in range(10):
            writer.append("k", bytes(300), i)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with StreamWriter(path) as writer:
        assert writer.append("k", b"after", 99)[0] == 10
    messages = _messages(path)
    assert [m.seq for m in messages] == list(range(1, 11))
    assert messages[-1].payload == b"after"


@pytest.mark.parametrize("interval", [128, 1024, 1 << 20])
def test_reopening_overwrites_a_trailing_eos_whatever_the_size(
    tmp_path: Path, interval: int
) -> None:
    path = tmp_path / "eos.ss"
    with StreamWriter(path, beacon_interval=interval) as writer:
        writer.append("k", b"one", 1)
        writer.close(eos=True)
    size_with_eos = path.stat().st_size
    with StreamWriter(path) as writer:
        pass  # reopening alone keeps the EOS
    assert path.stat().st_size == size_with_eos
    with StreamWriter(path) as writer:
        writer.append("k", b"two", 2)
    with FileReader(path) as reader:
        assert [m.payload for m in reader] == [b"one", b"two"]
        assert reader.eos is None


def test_header_only_file_with_interval_128_reopens(tmp_path: Path) -> None:
    path = tmp_path / "h.ss"
    StreamWriter(path, beacon_interval=128).close()
    with StreamWriter(path) as writer:
        writer.append("k", b"x", 1)
    assert [m.payload for m in _messages(path)] == [b"x"]
    assert path.read_bytes()[:2] == b"Ss"


def test_a_second_writer_in_this_process_appends_after_the_first(tmp_path: Path) -> None:
    path = tmp_path / "two.ss"
    with StreamWriter(path, beacon_interval=1024) as first, StreamWriter(path) as second:
        first.append("k", b"one", 1)
        first.flush()
        assert second.publish("k", b"two", 2).seq == 2
        assert first.publish("k", b"three", 3).seq == 3
    assert [(m.seq, m.payload) for m in _messages(path)] == [
        (1, b"one"),
        (2, b"two"),
        (3, b"three"),
    ]


def test_a_writer_in_another_process_appends_while_this_one_is_open(tmp_path: Path) -> None:
    path = tmp_path / "shared.ss"
    with StreamWriter(path) as writer:
        writer.publish("k", b"mine", 1)
        code = (
            "from trio_streams.file.writer import StreamWriter\n"
            f"with StreamWriter({str(path)!r}) as w:\n"
            "    print(w.publish('k', b'theirs', 2).seq)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "2"
        assert writer.publish("k", b"mine again", 3).seq == 3
    assert [m.payload for m in _messages(path)] == [b"mine", b"theirs", b"mine again"]


def test_an_exclusive_writer_keeps_others_out_until_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "exclusive.ss"
    with StreamWriter(path, exclusive=True) as writer:
        writer.publish("k", b"alone", 1)
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(WriterLockedError) as error:
                hold_exclusively(fd, str(path), timeout=0.05)
        finally:
            os.close(fd)
        assert str(path) in str(error.value)
    with StreamWriter(path) as after:
        assert after.publish("k", b"next", 2).seq == 2


def test_registry_shares_one_writer_and_closes_with_the_last_handle(tmp_path: Path) -> None:
    registry = WriterRegistry()
    path = tmp_path / "shared.ss"
    first = registry.acquire(path, beacon_interval=1024)
    second = registry.acquire(tmp_path / "." / "shared.ss")
    assert first.writer is second.writer
    assert first.append("k", b"1")[0] == 1
    assert second.append("k", b"2")[0] == 2
    first.close(eos=True)
    assert not second.writer.closed
    second.close()
    assert first.writer.closed
    assert len(registry) == 0
    with FileReader(path) as reader:
        assert [m.payload for m in reader] == [b"1", b"2"]
        assert reader.eos is not None
    with pytest.raises(WriterClosedError):
        first.append("k", b"3")


def test_flush_after_removal_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "gone.ss"
    writer = StreamWriter(path)
    writer.append("k", b"x")
    os.remove(path)
    with pytest.raises(FileRemovedError) as error:
        writer.flush()
    assert str(path) in str(error.value)
    writer.close()


def test_invalid_input_is_refused_before_anything_changes(tmp_path: Path) -> None:
    path = tmp_path / "strict.ss"
    with StreamWriter(path) as writer:
        with pytest.raises(ValueError, match="stream key"):
            writer.append("bad key", b"x")
        with pytest.raises(ValueError, match="9999"):
            writer.append("k", b"x", 253_402_300_800_000)
        assert writer.append("k", b"ok")[0] == 1


def test_refuses_to_append_to_a_corrupt_file(copy_vector: object, tmp_path: Path) -> None:
    source = next(p for p in ALL_SS if p.name == "one-key-1024.ss")
    data = bytearray(source.read_bytes())
    data[200] ^= 0xFF
    path = tmp_path / "corrupt.ss"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="at byte"):
        StreamWriter(path)
    StreamWriter(tmp_path / "other.ss").close()  # the lock was released


def test_a_frame_cut_across_beacons_is_truncated(tmp_path: Path) -> None:
    source = next(p for p in ALL_SS if p.name == "big-frames-1024.ss")
    messages = _messages(source)
    big = next(m for m, n in itertools.pairwise(messages) if n.offset - m.offset > 3000)
    path = tmp_path / "big.ss"
    path.write_bytes(source.read_bytes()[: big.offset + 2900])
    with StreamWriter(path) as writer:
        assert writer.append("blob", b"next")[0] == big.seq
    reread = _messages(path)
    assert reread[:-1] == [m for m in messages if m.offset < big.offset]
    assert reread[-1].payload == b"next"
