"""Each corruption gives its typed error naming the offset; mutated files never yield bad data."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_streams.file.errors import (
    ChecksumError,
    InvalidStreamKeyError,
    StreamFormatError,
    TimestampRangeError,
    TruncatedError,
)
from trio_streams.file.format import HEADER_SIZE, crc16
from trio_streams.file.reader import FileReader

from .conftest import ALL_SS

ONE_KEY = next(p for p in ALL_SS if p.name == "one-key-1024.ss")
BIG = next(p for p in ALL_SS if p.name == "big-frames-1024.ss")


def _patched(tmp_path: Path, source: Path, offset: int, value: bytes) -> Path:
    data = bytearray(source.read_bytes())
    data[offset : offset + len(value)] = value
    target = tmp_path / source.name
    target.write_bytes(bytes(data))
    return target


def _read_all(path: Path) -> list[object]:
    with FileReader(path) as reader:
        return list(reader)


def test_checksum_mismatch_names_the_frame(tmp_path: Path) -> None:
    # First frame of one-key-1024: key "orders" (7 bytes), 28 header bytes, payload "o".
    path = _patched(tmp_path, ONE_KEY, HEADER_SIZE + 7 + 28, b"p")
    with pytest.raises(ChecksumError) as error:
        _read_all(path)
    assert error.value.offset == HEADER_SIZE
    assert error.value.computed == crc16(b"p")
    assert error.value.received == crc16(b"o")
    assert str(path) in str(error.value)


def test_messages_before_a_bad_frame_are_returned_first(tmp_path: Path) -> None:
    with FileReader(ONE_KEY) as reader:
        second = reader.read_messages(2)[1]
    path = _patched(tmp_path, ONE_KEY, second.offset + 1, b"?")
    with FileReader(path) as reader:
        assert len(reader.read_messages(100)) == 1
        with pytest.raises(InvalidStreamKeyError) as error:
            reader.read_messages(100)
    assert error.value.offset == second.offset


def test_timestamp_past_year_9999(tmp_path: Path) -> None:
    path = _patched(tmp_path, ONE_KEY, HEADER_SIZE + 7 + 16, b"\xff" * 8)
    with pytest.raises(TimestampRangeError) as error:
        _read_all(path)
    assert error.value.offset == HEADER_SIZE


def frames_before(path: Path, offset: int) -> int:
    with FileReader(BIG) as reader:
        return sum(1 for m in reader if m.offset < offset)


def _big_frames_from(index: int) -> list[int]:
    """Frame offsets of big-frames-1024, shifted so frame ``index`` is over 2000 bytes long."""
    with FileReader(BIG) as reader:
        frames = [m.offset for m in reader]
    first_big = next(i for i in range(len(frames) - 1) if frames[i + 1] - frames[i] > 2000)
    return frames[first_big - index :]


@pytest.mark.parametrize("cut", [1, 20, 100, 1500])
def test_cut_frame_in_a_finished_file(tmp_path: Path, cut: int) -> None:
    data = BIG.read_bytes()
    frames = _big_frames_from(3)
    target = tmp_path / "cut.ss"
    target.write_bytes(data[: frames[3] + cut])
    with FileReader(target) as reader:
        assert len(reader.read_messages(100)) == frames_before(target, frames[3])
        with pytest.raises(TruncatedError) as error:
            list(reader)
    assert error.value.offset == frames[3]


def test_live_reader_waits_on_a_cut_frame(tmp_path: Path) -> None:
    data = BIG.read_bytes()
    frames = _big_frames_from(3)
    target = tmp_path / "growing.ss"
    target.write_bytes(data[: frames[3] + 700])
    with FileReader(target, on_eos="hold") as reader:
        assert reader.read_messages(100)[-1].offset == frames[2]
        assert reader.read_messages(100) == []
        with target.open("ab") as grow:
            grow.write(data[frames[3] + 700 : frames[5]])
        assert [m.offset for m in reader.read_messages(100)] == frames[3:5]


@st.composite
def _mutations(draw: st.DrawFn) -> tuple[Path, list[tuple[int, int]], int | None]:
    path = draw(st.sampled_from(ALL_SS))
    size = path.stat().st_size
    flips = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), max_size=4))
    cut = draw(st.none() | st.integers(0, size))
    return path, flips, cut


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_mutations())
def test_mutated_files_raise_typed_errors_only(
    tmp_path: Path, mutation: tuple[Path, list[tuple[int, int]], int | None]
) -> None:
    """Flipped bytes and truncation: only typed errors, and every message returned checks out."""
    path, flips, cut = mutation
    data = bytearray(path.read_bytes())
    for offset, xor in flips:
        data[offset] ^= xor
    if cut is not None:
        del data[cut:]
    target = tmp_path / "mutated.ss"
    target.write_bytes(bytes(data))
    try:
        with FileReader(target, internal=True, on_eos="include") as reader:
            for message in reader:
                # Re-derive the frame's stored checksum from the bytes on disk.
                end = message.offset + 1 + len(message.stream_key) + 28 + len(message.payload)
                if end + 2 <= len(data) and (end // reader.beacon_interval) == (
                    message.offset // reader.beacon_interval
                ):
                    stored = int.from_bytes(data[end : end + 2], "big")
                    assert stored == crc16(message.payload)
    except StreamFormatError:
        pass


def test_a_frame_cut_short_while_another_writer_appends_it_ends_a_replay_without_an_error(
    tmp_path: Path,
) -> None:
    # Writers hold the file's lock for each append; readers never wait for it. A frame found
    # cut short while the lock is held is an append under way, not a damaged file.
    data = BIG.read_bytes()
    frames = _big_frames_from(3)
    target = tmp_path / "appending.ss"
    target.write_bytes(data[: frames[3] + 700])
    expected = frames_before(target, frames[3])
    writer = os.open(target, os.O_RDWR)
    try:
        fcntl.flock(writer, fcntl.LOCK_EX)  # a writer mid-append
        with FileReader(target) as reader:
            assert len(list(reader)) == expected  # what is complete, then the end
        fcntl.flock(writer, fcntl.LOCK_UN)  # the writer is gone, the frame still cut
        with FileReader(target) as reader, pytest.raises(TruncatedError):
            list(reader)
    finally:
        os.close(writer)
