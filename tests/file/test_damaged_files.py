"""Damaged stream files: detected and reported with the file and byte offset, never garbled.

Bit flips, cuts and damaged frame headers are made with the public file-fault helpers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.support import serving
from trio_streams import AppFailed
from trio_streams.file import (
    BeaconError,
    ChecksumError,
    FilePosition,
    FileStream,
    FrameEndError,
    SequenceError,
    StreamFormatError,
    TruncatedError,
    UnprovenTailError,
)
from trio_streams.file.follower import FileSource
from trio_streams.file.format import Message
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.testing.faults import (
    FRAME_FIELDS,
    FrameField,
    cut_copies,
    damage_frame_header,
    flip_bit,
    frame_offsets,
    zero_range,
)

from .apps import file_app, write_at_instants, write_numbers
from .damage import KINDS, Census, classify, read_all, three_keys_file


def _damaged_payload(path: Path, count: int, bad: int) -> int:
    """``count`` messages with message ``bad`` (1-based) given a flipped payload bit; its offset."""
    write_numbers(path, count)
    frame = frame_offsets(path)[bad - 1]
    flip_bit(path, frame.fields["checksum"][0], 0, into=path.parent).replace(path)
    return frame.offset


# ---- a replay that meets a bad frame -----------------------------------------------------------


async def test_a_replay_delivers_every_good_message_before_a_bad_frame_then_fails_naming_it(
    tmp_path: Path,
) -> None:
    # 199 good messages, then a damaged one: with 64 messages per read, the last read before
    # the damage holds 7, which must be handled too.
    path = tmp_path / "bad.ss"
    offset = _damaged_payload(path, 260, 200)
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []

    @broker.subscriber(FileStream("s").replay(), name="sub")
    async def handle(n: int) -> None:
        await trio.lowlevel.checkpoint()
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with serving(app) as running:
            await running.wait_stopped()
    assert handled == list(range(1, 200))
    [error] = failed.value.exceptions
    cause = error.__cause__
    assert isinstance(cause, ChecksumError)
    assert (cause.path, cause.offset) == (str(path), offset)


@pytest.mark.parametrize("field", ["key", "shard", "seq", "payload_size", "checksum"])
async def test_a_replay_over_a_damaged_frame_header_handles_the_messages_before_it_then_fails(
    tmp_path: Path, field: str
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 100)
    frame = frame_offsets(source)[70]
    path = damage_frame_header(source, 70, field, into=tmp_path / "damaged")  # type: ignore[arg-type]
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []

    @broker.subscriber(FileStream("s").replay(), name="sub")
    async def handle(n: int) -> None:
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with serving(app) as running:
            await running.wait_stopped()
    assert handled == list(range(1, 71))
    cause = failed.value.exceptions[0].__cause__
    assert isinstance(cause, StreamFormatError)
    assert cause.path == str(path)
    assert cause.offset is not None and frame.offset <= cause.offset < frame.offset + frame.size


# ---- header damage is detected -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "error"),
    [
        ("key", SequenceError),  # "s" becomes "r": a new stream starting at seq 71
        ("shard", SequenceError),  # shard 1 of "s" starting at seq 71
        ("seq", SequenceError),
        ("payload_size", ChecksumError),
        ("checksum", ChecksumError),
        ("key_length", TruncatedError),
    ],
)
def test_each_damaged_header_field_of_a_frame_is_a_typed_error_at_that_frame(
    tmp_path: Path, field: str, error: type[StreamFormatError]
) -> None:
    source = tmp_path / "good.ss"
    # Fixed instants: a shortened key shifts the header, so what is read as the timestamp is
    # made of the real one's bytes, and which error is found first would follow the clock.
    write_at_instants(source, [1_765_000_000_000 + n for n in range(100)])
    frame = frame_offsets(source)[70]
    path = damage_frame_header(source, 70, field, into=tmp_path / "damaged")  # type: ignore[arg-type]
    got, raised = read_all(path)
    assert [m.seq for m in got] == list(range(1, 71))
    assert isinstance(raised, error), raised
    assert raised.path == str(path)
    assert raised.offset is not None and frame.offset <= raised.offset


def test_a_sequence_number_that_does_not_follow_names_the_stream_and_both_numbers(
    tmp_path: Path,
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 10)
    path = damage_frame_header(source, 4, "seq", into=tmp_path / "damaged", bit=3)
    with pytest.raises(SequenceError) as raised, FileReader(path) as reader:
        list(reader)
    assert "sequence number 13 of stream 's' does not follow 4" in str(raised.value)
    assert raised.value.offset == frame_offsets(source)[4].offset


def test_a_frame_whose_last_byte_is_not_0x0d_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 10)
    frame = frame_offsets(source)[3]
    path = flip_bit(source, frame.offset + frame.size - 1, 0, into=tmp_path / "damaged")
    got, raised = read_all(path)
    assert len(got) == 3
    assert isinstance(raised, FrameEndError) and raised.offset == frame.offset


def beaconed(tmp_path: Path) -> Path:
    """40 messages of one stream, with a beacon every 1024 bytes (the first splits a frame)."""
    source = tmp_path / "good.ss"
    with StreamWriter(source, beacon_interval=1024) as writer:
        for n in range(1, 41):
            writer.append("s", b"x" * 50 + str(n).encode())
    return source


def test_a_beacon_that_miscounts_the_rest_of_the_frame_it_splits_is_refused(
    tmp_path: Path,
) -> None:
    source = beaconed(tmp_path)
    data = source.read_bytes()
    # The beacon at 1024: 0x0D, remaining (u32), markers...; flip the lowest bit of remaining.
    assert data[1024] == 0x0D
    path = flip_bit(source, 1024 + 4, 0, into=tmp_path / "damaged")
    _, raised = read_all(path)
    assert isinstance(raised, BeaconError) and raised.offset == 1024
    assert int.from_bytes(data[1025:1029], "big") != 0  # it did split a frame


def test_a_beacon_marker_with_a_sequence_the_frames_before_it_do_not_have_is_refused(
    tmp_path: Path,
) -> None:
    source = beaconed(tmp_path)
    data = source.read_bytes()
    # The marker after the beacon's 6 head bytes: key length, key "s", shard (8), seq (8).
    assert data[1024 + 6 : 1024 + 8] == b"\x01s"
    path = flip_bit(source, 1024 + 8 + 8 + 7, 4, into=tmp_path / "damaged")
    _, raised = read_all(path)
    assert isinstance(raised, BeaconError)
    assert "beacon marker says stream 's' reached sequence" in str(raised)


def test_a_zeroed_range_inside_the_file_is_detected(tmp_path: Path) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 50)
    frames = frame_offsets(source)
    path = zero_range(source, frames[20].offset + 3, frames[22].offset, into=tmp_path / "d")
    got, raised = read_all(path)
    assert [m.seq for m in got] == list(range(1, 21))
    assert raised is not None and raised.offset == frames[20].offset


# ---- every single-bit flip of a small file, counted by kind ------------------------------------


def _census(source: Path, scratch: Path, flips: list[tuple[int, int]]) -> tuple[Census, list[int]]:
    """Read a copy of ``source`` per (offset, bit) with that bit flipped; the counts by kind,
    and the offsets whose copy returned a changed message before its error."""
    original = read_all(source)[0]
    data = source.read_bytes()
    copy = scratch / "copy.ss"
    census = Census()
    late: list[int] = []
    for offset, bit in flips:
        damaged = bytearray(data)
        damaged[offset] ^= 1 << bit
        copy.write_bytes(bytes(damaged))
        kind, error = classify(original, copy)
        census.add(kind, offset, bit, error)
        if kind == "garbled then detected":
            late.append(offset)
    return census, late


def _stream_fields(path: Path) -> set[int]:
    """The offsets of every frame's key, shard and sequence number bytes: what makes a message
    one of its stream."""
    return {
        offset
        for frame in frame_offsets(path)
        for field in ("key", "shard", "seq")
        for offset in frame.fields[field]
    }


@pytest.mark.slow
def test_every_single_bit_flip_of_a_small_file_is_detected_harmless_or_timestamp_only(
    tmp_path: Path,
) -> None:
    """60 messages on 3 keys, about 3 KB; one copy per byte, the flipped bit rotating."""
    source = tmp_path / "three.ss"
    three_keys_file(source)
    size = source.stat().st_size
    census, late = _census(source, tmp_path, [(o, o % 8) for o in range(size)])
    print()
    print(census.block(f"{size} bytes, no beacons: one copy per byte, one bit flipped"))
    assert census.counts["silent"] == 0, census.examples.get("silent")
    # A message whose key, shard or seq now makes it read as the next message of another stream
    # (a new one, or one whose numbers happen to match) is caught at the next message of either
    # stream, once delivered.
    assert set(late) <= _stream_fields(source), late
    assert set(census.counts) <= set(KINDS)
    assert census.counts["detected"] > 8 * census.counts["harmless"]


def test_every_single_bit_flip_around_the_beacons_is_detected_harmless_or_timestamp_only(
    tmp_path: Path,
) -> None:
    """The same file with beacons every 1024 bytes: every bit of the bytes within 24 of each."""
    source = tmp_path / "three.ss"
    original = three_keys_file(source, beacon_interval=1024)
    size = source.stat().st_size
    near = sorted({o for b in range(1024, size, 1024) for o in range(b - 24, min(b + 24, size))})
    census, late = _census(source, tmp_path, [(o, bit) for o in near for bit in range(8)])
    print()
    print(census.block(f"{size} bytes, beacons every 1024: every bit within 24 bytes of one"))
    assert census.counts["silent"] == 0, census.examples.get("silent")
    assert set(late) <= _stream_fields(source), late
    beacon_bytes = [o for o in near if o % 1024 < 7]
    for offset in beacon_bytes:  # the beacon's 0x0D and remaining count: detected
        for bit in range(8):
            kind, error = classify(original, flip_bit(source, offset, bit, into=tmp_path / "b"))
            assert kind == "detected", (offset, bit, error)


# ---- every cut copy opens as a provably cut tail or is refused ----------------------------------


def test_every_cut_copy_of_the_last_four_frames_is_a_provable_cut_tail_or_refused_never_garbled(
    tmp_path: Path,
) -> None:
    source = tmp_path / "written.ss"
    with StreamWriter(source, beacon_interval=1024) as writer:
        for n in range(1, 31):
            writer.append(("a", "b")[n % 2], (b"payload %d " % n) * (n % 7 + 1))
    frames = frame_offsets(source)
    original, _ = read_all(source)
    region = range(frames[-4].offset, source.stat().st_size)
    outcomes = {"cut away": 0, "refused": 0}
    for copy in cut_copies(source, region, into=tmp_path / "cuts"):
        got, raised = read_all(copy)
        assert got == original[: len(got)], copy  # never a garbled message
        cut = copy.stat().st_size
        whole = [m for m in original if m.offset + _frame_size(m) <= cut]
        if raised is None:  # the cut fell between two frames
            assert got == whole
        else:
            assert isinstance(raised, TruncatedError) and raised.path == str(copy)
            assert got == whole
        if _reopened(copy):
            outcomes["cut away"] += 1
            assert read_all(copy) == (whole, None)
        else:
            outcomes["refused"] += 1
    print(f"\n{len(region)} cut copies: {outcomes}")
    assert outcomes["cut away"] > 0


def _reopened(path: Path) -> bool:
    """Open ``path`` as a writer does: True if it cut the tail away, False if it refused."""
    try:
        with StreamWriter(path) as writer:
            writer.flush()
    except UnprovenTailError as refused:
        if refused.offset is None:  # a refusal names where the tail starts
            raise
        return False
    return True


def _frame_size(message: Message) -> int:
    return 32 + len(message.stream_key) + len(message.payload)


# ---- the tools exit non-zero on damage ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", ["decode", "stat"])
def test_file_decode_and_stat_exit_1_on_a_flipped_sequence_number_naming_the_offset(
    tmp_path: Path, command: str
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 10)
    frame = frame_offsets(source)[1]
    path = damage_frame_header(source, 1, "seq", into=tmp_path / "d", byte=2, bit=7)
    result = cli("file", command, str(path))
    assert result.returncode == 1, result.stdout
    [line] = [x for x in stderr_lines(result) if x.startswith(f"trio-streams file {command}")]
    assert f"error: {path} at byte {frame.offset}: sequence number" in line, result.stderr


# ---- the helpers -------------------------------------------------------------------------------


def test_frame_offsets_names_each_field_of_a_frame_split_by_a_beacon(tmp_path: Path) -> None:
    source = tmp_path / "split.ss"
    with StreamWriter(source, beacon_interval=128 * 2) as writer:
        for n in range(1, 6):
            writer.append("key", b"p" * 40 + bytes([48 + n]))
    data = source.read_bytes()
    for frame in frame_offsets(source):
        seq = bytes(data[i] for i in frame.fields["seq"])
        assert int.from_bytes(seq, "big") == frame.seq
        key = bytes(data[i] for i in frame.fields["key"])
        assert key == b"key"
        assert set(frame.fields) == set(FRAME_FIELDS)


def test_damage_frame_header_leaves_the_original_as_it_was(tmp_path: Path) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 5)
    before = source.read_bytes()
    for field in FRAME_FIELDS:
        copy = damage_frame_header(source, 2, field, into=tmp_path / "d")
        assert copy != source and copy.read_bytes() != before
    assert source.read_bytes() == before


# ---- a live reader at damage in the middle of a file ---------------------------------------------


async def test_a_live_subscription_at_a_damaged_size_field_fails_within_its_poll_interval(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 40)
    frame = frame_offsets(source)[20]
    # The size field's high byte: the frame now says it runs 16 MiB past the end of the file.
    path = damage_frame_header(source, 20, "payload_size", into=tmp_path / "d", byte=1)
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []

    @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()), name="live")
    async def handle(n: int) -> None:
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed:
        with trio.fail_after(3):  # the polling timeout is at most 1.024 s
            async with serving(app) as running:
                await running.wait_stopped()
    assert handled == list(range(1, 21))
    cause = failed.value.exceptions[0].__cause__
    assert isinstance(cause, UnprovenTailError)
    assert (cause.path, cause.offset) == (str(path), frame.offset)


async def test_a_live_subscription_at_a_frame_cut_by_a_crash_keeps_waiting(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "torn.ss"
    write_numbers(path, 10)
    last = frame_offsets(path)[-1]
    with path.open("r+b") as f:
        f.truncate(last.offset + 7)
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []

    @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()), name="live")
    async def handle(n: int) -> None:
        handled.append(n)

    with trio.move_on_after(30) as waited:
        async with serving(app) as running:
            await running.wait_stopped()
    assert waited.cancelled_caught
    assert handled == list(range(1, 10))


# ---- a reader that starts at the tip checks its first frame --------------------------------------


async def _read_until_refused(source: FileSource, got: list[int]) -> None:
    while True:
        batch = source.read_available(64)
        got.extend(int(m.payload) for m in batch)
        if not batch:
            await source.wait()


async def _live_from_tip(path: Path, damaged: bytes, split: int) -> tuple[list[int], Exception]:
    """Open a live source at the tip of ``damaged[:split]``, append the rest; what it reads."""
    await trio.Path(path).write_bytes(damaged[:split])
    got: list[int] = []
    async with await FileSource.open(path, mode="live", keys={"s"}) as source:
        async with await trio.open_file(path, "ab") as f:
            await f.write(damaged[split:])
        with trio.fail_after(3), pytest.raises(StreamFormatError) as raised:
            await _read_until_refused(source, got)
    return got, raised.value


@pytest.mark.parametrize(("field", "byte", "bit"), [("key", 0, 0), ("shard", 0, 6), ("seq", 0, 6)])
async def test_a_live_reader_checks_the_first_frame_after_the_tip_it_started_at(
    tmp_path: Path, autojump_clock: trio.abc.Clock, field: FrameField, byte: int, bit: int
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 40, beacon_interval=1 << 20)
    frames = frame_offsets(source)
    damaged = damage_frame_header(source, 20, field, into=tmp_path / "d", byte=byte, bit=bit)
    got, error = await _live_from_tip(tmp_path / "live.ss", damaged.read_bytes(), frames[20].offset)
    assert got == []
    assert isinstance(error, SequenceError)
    assert error.offset == frames[20].offset


@pytest.mark.parametrize(("field", "byte", "bit"), [("seq", 0, 6), ("seq", 7, 1)])
async def test_a_live_reader_past_a_beacon_checks_the_first_frame_after_the_tip_it_started_at(
    tmp_path: Path, autojump_clock: trio.abc.Clock, field: FrameField, byte: int, bit: int
) -> None:
    # Many beacon pages: the tip scan reads only the last one, and knows stream 's' from it
    # (a frame of a stream it does not know is taken as that stream's next: see the guide).
    source = tmp_path / "good.ss"
    write_numbers(source, 300, beacon_interval=1024)
    frames = frame_offsets(source)
    damaged = damage_frame_header(source, 280, field, into=tmp_path / "d", byte=byte, bit=bit)
    got, error = await _live_from_tip(
        tmp_path / "live.ss", damaged.read_bytes(), frames[280].offset
    )
    assert got == []
    assert isinstance(error, SequenceError)
    assert error.offset == frames[280].offset


async def test_a_live_reader_delivers_no_changed_shard_before_the_error_it_flags(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 40, beacon_interval=1 << 20)
    frames = frame_offsets(source)
    damaged = damage_frame_header(source, 25, "shard", into=tmp_path / "d", byte=7)
    got, error = await _live_from_tip(tmp_path / "live.ss", damaged.read_bytes(), frames[20].offset)
    assert got == list(range(21, 26))
    assert isinstance(error, SequenceError)
    assert error.offset == frames[25].offset


# ---- a file cut inside its header ---------------------------------------------------------------


def _header_bytes(tmp_path: Path) -> bytes:
    whole = tmp_path / "whole.ss"
    StreamWriter(whole, created_at_ms=1_700_000_000_000).close()
    return whole.read_bytes()[:128]


@pytest.mark.parametrize("cut", [1, 2, 3, 9, 20, 64, 127])
def test_the_next_writer_completes_a_file_cut_inside_its_header_and_goes_on(
    tmp_path: Path, cut: int
) -> None:
    path = tmp_path / "half.ss"
    path.write_bytes(_header_bytes(tmp_path)[:cut])
    write_numbers(path, 3)
    with FileReader(path) as reader:
        assert [int(m.payload) for m in reader] == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("at", "value"), [(0, 0x54), (2, 2), (3, 200), (12, 0xFF), (30, 1), (63, 1)], ids=str
)
def test_a_file_whose_first_bytes_are_not_a_header_prefix_stays_refused(
    tmp_path: Path, at: int, value: int
) -> None:
    path = tmp_path / "half.ss"
    prefix = bytearray(_header_bytes(tmp_path)[:64])
    prefix[at] = value
    path.write_bytes(bytes(prefix))
    with pytest.raises(StreamFormatError):
        write_numbers(path, 3)
    assert path.read_bytes() == bytes(prefix)
    assert cli("file", "repair", str(path), "--yes").returncode == 1
    assert path.read_bytes() == bytes(prefix)


def test_file_repair_moves_a_header_cut_by_a_crash_aside_and_the_next_writer_starts_anew(
    tmp_path: Path,
) -> None:
    path = tmp_path / "half.ss"
    prefix = _header_bytes(tmp_path)[:64]
    path.write_bytes(prefix)
    result = cli("file", "repair", str(path), "--yes")
    assert result.returncode == 0, result.stderr
    assert "header write cut short by a crash" in result.stdout
    assert path.read_bytes() == b""
    assert (tmp_path / "half.ss.tail-0").read_bytes() == prefix
    write_numbers(path, 2)
    with FileReader(path) as reader:
        assert [int(m.payload) for m in reader] == [1, 2]


# ---- a live subscription on a file damaged in the middle -----------------------------------------


@pytest.mark.parametrize("field", ["checksum", "key_length", "payload_size"])
@pytest.mark.parametrize("start", ["beginning", "tip"])
async def test_a_live_subscription_delivers_the_good_messages_then_fails_alike_for_every_damage(
    tmp_path: Path, autojump_clock: trio.abc.Clock, field: FrameField, start: str
) -> None:
    source = tmp_path / "good.ss"
    write_numbers(source, 40, beacon_interval=1 << 20)  # the tip scan reads every frame
    frame = frame_offsets(source)[20]
    path = damage_frame_header(source, 20, field, into=tmp_path / "d", byte=0, bit=6)
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []
    stream = (
        FileStream("s", start_at=FilePosition.beginning())
        if start == "beginning"
        else FileStream("s")
    )

    @broker.subscriber(stream, name="live")
    async def handle(n: int) -> None:
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed:
        with trio.fail_after(3):  # the polling timeout is at most 1.024 s
            async with serving(app) as running:
                await running.wait_stopped()
    assert handled == (list(range(1, 21)) if start == "beginning" else [])
    cause = failed.value.exceptions[0].__cause__
    assert isinstance(cause, StreamFormatError)
    assert (cause.path, cause.offset) == (str(path), frame.offset)


# ---- a reader that starts at a seek point checks its first frames --------------------------------


@pytest.mark.parametrize(
    ("interval", "field", "byte", "bit"),
    [(1 << 20, "shard", 7, 0), (1 << 20, "seq", 0, 6), (1024, "seq", 0, 6)],
)
def test_a_reader_that_seeks_checks_the_first_frame_of_each_stream_after_the_seek_point(
    tmp_path: Path, interval: int, field: FrameField, byte: int, bit: int
) -> None:
    # Streams 'a' and 'b' alternate: frame 2k is 'a' k+1, frame 2k+1 is 'b' k+1.
    source = tmp_path / "good.ss"
    with StreamWriter(source, beacon_interval=interval) as writer:
        for _ in range(60):
            writer.append("a", b"a")
            writer.append("b", b"b")
    frames = frame_offsets(source)
    path = damage_frame_header(source, 81, field, into=tmp_path / "d", byte=byte, bit=bit)
    got: list[tuple[str, int]] = []
    with FileReader(path) as reader:
        assert reader.seek(FilePosition.sequence(41), key="a") == frames[80].offset
        with pytest.raises(SequenceError) as raised:
            got.extend((m.stream_key, m.seq) for m in reader)
    assert got == [("a", 41)]
    assert raised.value.offset == frames[81].offset
