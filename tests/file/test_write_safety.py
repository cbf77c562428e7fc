"""A writer never discards bytes it cannot prove are a tail cut short by a crash.

Every way of opening a file for writing (``StreamWriter``, ``writers.acquire``, ``trio-streams
file write``, publishing through ``FileBroker``) either continues the file with nothing lost, or
refuses with a typed error naming the offset and leaves the file byte for byte as it was.
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from tests.support import serving
from trio_streams import App
from trio_streams.cli.commands import main as cli_main
from trio_streams.file import FileBroker
from trio_streams.file.errors import (
    ChecksumError,
    StreamFormatError,
    UnprovenTailError,
)
from trio_streams.file.format import (
    DEFAULT_BEACON_INTERVAL,
    decode_beacon,
    encode_frame,
    encode_key,
)
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter, WriterRegistry, writers

REPO = Path(__file__).resolve().parents[2]
CREATED_AT_MS = 1_700_000_000_000
KEYS = ("orders", "audit.log")

Outcome = Literal["refused", "appended"]


# ---- files to damage --------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    offset: int
    key_len: int
    payload_len: int
    #: File offset of each byte of the frame, in order (beacons that split it left out).
    positions: tuple[int, ...]

    def field(self, name: str) -> range:
        """Indexes (into ``positions``) of one field of the frame."""
        k, p = self.key_len, self.payload_len
        return {
            "key length": range(1),
            "key": range(1, 1 + k),
            "shard": range(1 + k, 9 + k),
            "seq": range(9 + k, 17 + k),
            "timestamp": range(17 + k, 25 + k),
            "size": range(25 + k, 29 + k),
            "payload": range(29 + k, 29 + k + p),
            "checksum": range(29 + k + p, 31 + k + p),
            "terminator": range(31 + k + p, 32 + k + p),
        }[name]


def frames_of(path: Path) -> list[Frame]:
    data = path.read_bytes()
    with FileReader(path, internal=True, on_eos="include") as reader:
        interval = reader.beacon_interval
        messages = list(reader)
    out = []
    for m in messages:
        length = 32 + len(m.stream_key) + len(m.payload)
        positions: list[int] = []
        at = m.offset
        while len(positions) < length:
            if at % interval == 0:
                parsed = decode_beacon(data, at, at, None)
                assert parsed is not None
                at += parsed[1]
                continue
            positions.append(at)
            at += 1
        out.append(Frame(m.offset, len(m.stream_key), len(m.payload), tuple(positions)))
    return out


def beacon_offsets(path: Path, interval: int) -> list[int]:
    size = path.stat().st_size
    return list(range(interval, size, interval))


def write_file(
    path: Path,
    *,
    interval: int,
    count: int = 24,
    last_payload: int | None = None,
    last_spans: bool = False,
    eos: bool = False,
) -> None:
    """``count`` messages of two keys, text and binary payloads, then maybe an EOS.

    ``last_spans``: the last frame starts shortly before a beacon and runs 100 bytes past it.
    """
    rng = random.Random(20240601)
    with StreamWriter(path, beacon_interval=interval, created_at_ms=CREATED_AT_MS) as writer:
        for i in range(count):
            key = KEYS[i % 2]
            size = rng.randrange(12, 150)
            if i == count - 1 and last_payload is not None:
                size = last_payload
            elif i == count - 1 and last_spans:
                while interval - writer.offset % interval > 200:
                    writer.append(KEYS[1], rng.randbytes(rng.randrange(12, 100)))
                size = interval - writer.offset % interval + 100 - 32 - len(key)
            if i % 2:
                payload = rng.randbytes(size)
            else:
                payload = "".join(rng.choice('abc xyz:{}"0123') for _ in range(size)).encode()
            writer.append(key, payload, CREATED_AT_MS + i)
        if eos:
            writer.write_eos(CREATED_AT_MS + 999)


#: Kinds of file: beacons after every place damaged (the last frame spans several), beacons but
#: none after a small last frame, and the default interval (no beacon at all).
KINDS = {
    "beacons": {"interval": 1024, "last_spans": True},
    "beacons-small-last": {"interval": 1024, "last_payload": 20},
    "no-beacons": {"interval": DEFAULT_BEACON_INTERVAL},
}


def make(tmp_path: Path, kind: str, *, eos: bool = False) -> Path:
    """A fresh copy of the file of ``kind`` in ``tmp_path``."""
    path = tmp_path / f"{kind}.ss"
    path.write_bytes(_made(kind, eos))
    return path


@functools.cache
def _made(kind: str, eos: bool) -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{kind}.ss"
        write_file(path, eos=eos, **KINDS[kind])  # type: ignore[arg-type]
        return path.read_bytes()


# ---- the ways of opening a file for writing ---------------------------------------------------


def via_stream_writer(path: Path) -> None:
    with StreamWriter(path) as writer:
        writer.append("orders", b"appended", CREATED_AT_MS + 5000)


def via_writers_acquire(path: Path) -> None:
    handle = writers.acquire(path)  # the process-wide registry FileBroker uses
    try:
        handle.append("orders", b"appended", CREATED_AT_MS + 5000)
    finally:
        handle.close()


def via_cli_in_process(path: Path) -> None:
    """``trio-streams file write`` (its ``main``, in this process); errors become exceptions."""
    # `file write` refuses a seq that does not follow the file's last of the stream: give it
    # the one after the last a reader finds before any damage.
    row = {"stream_key": "orders", "shard": 0, "seq": _next_orders_seq(path)}
    row |= {"timestamp_ms": CREATED_AT_MS + 5000}
    row |= {"payload": "appended", "encoding": "utf8"}
    stdin, stderr = sys.stdin, sys.stderr
    sys.stdin, sys.stderr = io.StringIO(json.dumps(row) + "\n"), io.StringIO()
    try:
        code = cli_main(["file", "write", str(path)])
        message = sys.stderr.getvalue()
    finally:
        sys.stdin, sys.stderr = stdin, stderr
    if code != 0:
        raise CliRefused(code, message)


def _next_orders_seq(path: Path) -> int:
    last = 0
    try:
        with FileReader(path, keys=["orders"]) as reader:
            for message in reader:
                last = message.seq
    except StreamFormatError:
        pass
    return last + 1


class CliRefused(Exception):
    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr)
        self.code = code
        self.stderr = stderr


PATHS: dict[str, Callable[[Path], None] | None] = {
    "StreamWriter": via_stream_writer,
    "writers.acquire": via_writers_acquire,
    "file write": via_cli_in_process,
    "FileBroker": None,  # async: see via_file_broker
}


async def via_file_broker(path: Path) -> StreamFormatError | None:
    """An app publishing one message through ``FileBroker`` (which uses ``writers.acquire``);
    returns the error ``publish`` raised, if any."""
    app = App("publisher")
    broker = app.broker(FileBroker(path))
    async with serving(app):
        try:
            await broker.publish("orders", b"appended")
        except StreamFormatError as error:
            return error
    return None


async def write_through(how: str, path: Path) -> StreamFormatError | CliRefused | None:
    """Write one message to ``path`` the way ``how`` does; the refusal, if any."""
    opener = PATHS[how]
    if opener is None:
        return await via_file_broker(path)
    try:
        opener(path)
    except (StreamFormatError, CliRefused) as error:
        return error
    return None


async def open_for_writing(how: str, path: Path) -> Outcome:
    """Write one message through ``how``; check the promise either way and say what happened."""
    before = path.read_bytes()  # noqa: ASYNC240 (a test's small file)
    return _judge(how, path, before, await write_through(how, path))


def _judge(
    how: str, path: Path, before: bytes, refusal: StreamFormatError | CliRefused | None
) -> Outcome:
    if isinstance(refusal, StreamFormatError):
        assert refusal.offset is not None, refusal
        assert str(path) in str(refusal)
    elif isinstance(refusal, CliRefused):
        assert refusal.code == 1
        assert refusal.stderr.startswith(f"trio-streams file write: error: {path} at byte "), (
            refusal.stderr
        )
    if refusal is not None:
        assert path.read_bytes() == before, f"{how} changed the file it refused"
        return "refused"
    after = path.read_bytes()
    assert after.startswith(before), f"{how} discarded bytes"
    with FileReader(path) as reader:
        assert list(reader)[-1].payload == b"appended"
    return "appended"


async def every_path(tmp_path: Path, damaged: bytes) -> set[Outcome]:
    """The outcome of opening ``damaged`` through every path (each on a fresh copy)."""
    outcomes = set()
    for n, how in enumerate(PATHS):
        path = tmp_path / f"copy-{n}.ss"
        path.write_bytes(damaged)
        outcomes.add(await open_for_writing(how, path))
    assert len(outcomes) == 1, f"the write paths disagree: {outcomes}"
    return outcomes


# ---- one test per sentence ---------------------------------------------------------------------


def test_a_corrupt_length_field_is_refused_not_truncated(tmp_path: Path) -> None:
    """The reported case: 7,980 messages, under 1 MiB at the default interval (so no beacon after
    the damage), one bit of a frame's size field flipped in the middle of the file."""
    path = tmp_path / "big.ss"
    rng = random.Random(1)
    with StreamWriter(path, created_at_ms=CREATED_AT_MS) as writer:
        for i in range(7980):
            writer.append("orders", rng.randbytes(rng.randrange(60, 90)), CREATED_AT_MS + i)
    data = bytearray(path.read_bytes())
    assert 800_000 < len(data) < DEFAULT_BEACON_INTERVAL
    middle = frames_of(path)[3950]
    data[middle.positions[middle.field("size")[0]]] ^= 0x01  # 16 MiB more: past the end
    path.write_bytes(data)
    with pytest.raises(UnprovenTailError) as error:
        StreamWriter(path)
    assert error.value.offset == middle.offset
    assert path.read_bytes() == data
    with pytest.raises(UnprovenTailError):  # and later writes do not reuse sequence numbers
        WriterRegistry().acquire(path)
    assert path.read_bytes() == data


def test_an_unproven_tail_is_refused_with_a_typed_error_naming_path_offset_and_repair(
    tmp_path: Path,
) -> None:
    path = make(tmp_path, "no-beacons")
    last = frames_of(path)[-1]
    data = bytearray(path.read_bytes())
    data[last.positions[last.field("size")[0]]] ^= 0xFF
    path.write_bytes(data)
    with pytest.raises(UnprovenTailError) as error:
        StreamWriter(path)
    assert isinstance(error.value, StreamFormatError)
    assert error.value.offset == last.offset
    assert error.value.path == str(path)
    assert str(error.value).startswith(f"{path} at byte {last.offset}: ")
    assert f"trio-streams file repair {path}" in str(error.value)
    assert path.read_bytes() == data


def test_a_corrupt_frame_inside_the_file_reaches_the_writer_with_the_repair_hint(
    tmp_path: Path,
) -> None:
    path = make(tmp_path, "beacons")
    frame = frames_of(path)[3]
    data = bytearray(path.read_bytes())
    data[frame.positions[frame.field("payload")[0]]] ^= 0x01
    path.write_bytes(data)
    with pytest.raises(ChecksumError) as error:
        StreamWriter(path)
    assert error.value.offset == frame.offset
    assert any(f"trio-streams file repair {path}" in note for note in error.value.__notes__)
    assert path.read_bytes() == data


@pytest.mark.slow
def test_the_cli_write_command_refuses_an_unproven_tail_in_a_real_process(tmp_path: Path) -> None:
    path = make(tmp_path, "no-beacons")
    last = frames_of(path)[-1]
    data = bytearray(path.read_bytes())
    data[last.positions[last.field("size")[2]]] ^= 0x01
    path.write_bytes(data)
    row = '{"stream_key": "orders", "shard": 0, "seq": 1, "timestamp_ms": 1, "payload": "x"}\n'
    result = subprocess.run(
        [sys.executable, "-m", "trio_streams", "file", "write", str(path)],
        input=row.encode(),
        capture_output=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert stderr.startswith(f"trio-streams file write: error: {path} at byte {last.offset}: "), (
        stderr
    )
    assert f"trio-streams file repair {path}" in stderr
    assert path.read_bytes() == data


async def test_an_app_publishing_through_file_broker_gets_the_typed_error(tmp_path: Path) -> None:
    path = make(tmp_path, "no-beacons")
    middle = frames_of(path)[12]
    data = bytearray(path.read_bytes())
    data[middle.positions[middle.field("size")[0]]] ^= 0x80
    path.write_bytes(data)
    app = App("publisher")
    broker = app.broker(FileBroker(path))
    async with serving(app):
        with pytest.raises(UnprovenTailError) as error:
            await broker.publish("orders", b"lost?")
        with pytest.raises(UnprovenTailError):  # every publish, not only the first
            await broker.publish("orders", b"lost?")
    assert error.value.offset == middle.offset
    assert path.read_bytes() == data


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_tail_cut_at_every_byte_of_the_last_frame_is_cut_away_and_nothing_is_lost(
    tmp_path: Path, kind: str
) -> None:
    path = make(tmp_path, kind)
    data = path.read_bytes()
    last = frames_of(path)[-1]
    with FileReader(path) as reader:
        kept = [m for m in reader if m.offset < last.offset]
    boundaries = range(last.offset // 1024 * 1024 + 1024, len(data), 1024)
    in_beacons = {b + i for b in boundaries for i in range(60)}
    for cut in range(last.offset + 1, len(data)):
        # Every cut through the writer; through every path, every 7th and those in beacons.
        for how in PATHS if cut % 7 == 0 or cut in in_beacons else ["StreamWriter"]:
            path.write_bytes(data[:cut])
            with_context = f"cut at {cut}, {how}"
            assert await open_for_writing_after_cut(how, path) == "appended", with_context
            with FileReader(path) as reader:
                again = list(reader)
            assert again[:-1] == kept, with_context
            assert again[-1].payload == b"appended", with_context
            assert path.read_bytes()[: last.offset] == data[: last.offset], with_context


async def open_for_writing_after_cut(how: str, path: Path) -> Outcome:
    refusal = await write_through(how, path)
    assert refusal is None, f"a genuinely cut tail was refused: {refusal}"
    return "appended"


def _frame_ending_on_a_boundary(tmp_path: Path, interval: int) -> Path:
    """A file whose last frame ends exactly at a multiple of the interval (a beacon follows)."""
    path = tmp_path / "boundary.ss"
    with StreamWriter(path, beacon_interval=interval, created_at_ms=CREATED_AT_MS) as writer:
        for i in range(10):
            writer.append(KEYS[i % 2], b"x" * (20 + 7 * i), CREATED_AT_MS + i)
        boundary = (writer.offset // interval + 1) * interval
        if boundary - writer.offset < 40:
            boundary += interval
        payload = boundary - writer.offset - 32 - len("orders")
        writer.append("orders", bytes(range(256)) * (payload // 256) + b"y" * (payload % 256))
        assert writer.offset > boundary  # the beacon after the frame
    return path


async def test_a_beacon_cut_at_every_byte_after_a_frame_ending_on_the_boundary_is_cut_away(
    tmp_path: Path,
) -> None:
    path = _frame_ending_on_a_boundary(tmp_path, 1024)
    data = path.read_bytes()
    boundary = frames_of(path)[-1].positions[-1] + 1
    assert data[boundary] == 0x0D and len(data) > boundary + 7  # a beacon with a marker
    with FileReader(path) as reader:
        kept = list(reader)
    for cut in range(boundary, len(data)):
        for how in PATHS:
            path.write_bytes(data[:cut])
            assert await open_for_writing_after_cut(how, path) == "appended", f"cut at {cut}, {how}"
            with FileReader(path) as reader:
                again = list(reader)
            assert again[:-1] == kept
            assert path.read_bytes()[:boundary] == data[:boundary]


async def test_a_trailing_eos_cut_at_every_byte_is_cut_away(tmp_path: Path) -> None:
    path = make(tmp_path, "beacons-small-last", eos=True)
    data = path.read_bytes()
    eos = frames_of(path)[-1]
    assert eos.key_len == len("SEA_STREAMER_INTERNAL")
    with FileReader(path) as reader:
        kept = list(reader)
    for cut in range(eos.offset + 1, len(data)):
        path.write_bytes(data[:cut])
        assert await open_for_writing_after_cut("StreamWriter", path) == "appended", f"cut at {cut}"
        with FileReader(path) as reader:
            assert list(reader)[:-1] == kept


@pytest.mark.parametrize("field", ["size", "key length", "checksum", "payload"])
async def test_a_damaged_trailing_eos_is_refused_not_overwritten(
    tmp_path: Path, field: str
) -> None:
    path = make(tmp_path, "no-beacons", eos=True)
    eos = frames_of(path)[-1]
    data = bytearray(path.read_bytes())
    for index in eos.field(field):
        damaged = bytearray(data)
        damaged[eos.positions[index]] ^= 0x01
        assert await every_path(tmp_path, bytes(damaged)) == {"refused"}, (field, index)


# ---- the matrix: every field, every place, with and without beacons after -------------------

#: (field, byte of the field or None for every byte, how the byte is changed).
FRAME_DAMAGE = [
    ("key length", 0, "+1"),
    ("key length", 0, "-1"),
    ("key length", 0, "^0xff"),
    ("key", 0, "^0xff"),
    ("key", -1, "^0x01"),
    ("shard", -1, "^0x01"),
    ("seq", 0, "^0xff"),
    ("timestamp", 0, "^0x01"),
    ("timestamp", -1, "^0x01"),
    ("size", None, "^0x01"),
    ("size", None, "^0xff"),
    ("size", -1, "-1"),
    ("payload", 0, "^0x01"),
    ("checksum", None, "^0x01"),
    ("terminator", 0, "^0xff"),
]
#: Damage every reader notices (the rest — shard, seq, a low timestamp byte, a key character
#: swapped for another valid one, the terminator — is not corruption a reader can see).
DETECTED = {"key length", "size", "payload", "checksum"}


def _change(value: int, how: str) -> int:
    if how == "+1":
        return (value + 1) % 256
    if how == "-1":
        return (value - 1) % 256
    return value ^ int(how[1:], 16)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("place", ["first", "middle", "last"])
@pytest.mark.parametrize(
    ("field", "byte", "how"), FRAME_DAMAGE, ids=[f"{f}[{b}]{h}" for f, b, h in FRAME_DAMAGE]
)
async def test_damage_to_any_frame_field_is_refused_or_loses_nothing(
    tmp_path: Path, kind: str, place: str, field: str, byte: int | None, how: str
) -> None:
    path = make(tmp_path, kind)
    frames = frames_of(path)
    frame = {"first": frames[0], "middle": frames[len(frames) // 2], "last": frames[-1]}[place]
    data = path.read_bytes()
    indexes = frame.field(field)
    for index in indexes if byte is None else [indexes[byte]]:
        damaged = bytearray(data)
        at = frame.positions[index]
        damaged[at] = _change(damaged[at], how)
        outcomes = await every_path(tmp_path, bytes(damaged))
        if field in DETECTED or (field == "key" and how == "^0xff"):
            assert outcomes == {"refused"}, f"{field} byte {index} at {at} was not noticed"
        if field == "timestamp" and index == indexes[0]:
            assert outcomes == {"refused"}, "a timestamp after the year 9999 was not noticed"


#: (field, byte index within the beacon, change). Markers start at byte 6.
BEACON_DAMAGE = [
    ("first 0x0d", 0, "^0xff"),
    ("remaining", 1, "^0x01"),
    ("remaining", 2, "^0x01"),
    ("remaining", 3, "^0x01"),
    ("remaining", 4, "^0x01"),
    ("remaining", 4, "^0xff"),
    ("count", 5, "+1"),
    ("count", 5, "-1"),
    ("count", 5, "^0xff"),
    ("marker key length", 6, "+1"),
    ("marker key length", 6, "-1"),
    ("marker key", 7, "^0xff"),
    ("marker shard", -27, "^0x01"),
    ("marker seq", -19, "^0x80"),
    ("marker timestamp", -11, "^0x01"),
    ("marker timestamp", -4, "^0x01"),
    ("marker checksum", -3, "^0x01"),
    ("last 0x0d", -1, "^0xff"),
]


@pytest.mark.parametrize("place", ["first", "middle", "last"])
@pytest.mark.parametrize(
    ("field", "byte", "how"), BEACON_DAMAGE, ids=[f"{f}[{b}]{h}" for f, b, h in BEACON_DAMAGE]
)
async def test_damage_to_any_beacon_field_is_refused_or_loses_nothing(
    tmp_path: Path, place: str, field: str, byte: int, how: str
) -> None:
    path = make(tmp_path, "beacons")
    data = path.read_bytes()
    offsets = beacon_offsets(path, 1024)
    at = {"first": offsets[0], "middle": offsets[len(offsets) // 2], "last": offsets[-1]}[place]
    parsed = decode_beacon(data, at, at, None)
    assert parsed is not None and len(parsed[0].markers) == 1
    size = parsed[1]
    index = at + (byte if byte >= 0 else size + byte)
    damaged = bytearray(data)
    damaged[index] = _change(damaged[index], how)
    outcomes = await every_path(tmp_path, bytes(damaged))
    if field in ("count", "marker key length") or (field == "marker key" and how == "^0xff"):
        assert outcomes == {"refused"}, f"{field} of the beacon at {at} was not noticed"


async def test_repeated_opens_of_a_refused_file_never_change_it(tmp_path: Path) -> None:
    path = make(tmp_path, "beacons")
    last = frames_of(path)[-1]
    data = bytearray(path.read_bytes())
    data[last.positions[last.field("size")[3]]] ^= 0x01
    path.write_bytes(data)
    for _ in range(3):
        for how in PATHS:
            assert await open_for_writing(how, path) == "refused"
    assert path.read_bytes() == data


# ---- nasty cases -----------------------------------------------------------------------------


def _last_frame_across_a_beacon(path: Path, continuation: bytes, *, interval: int = 1024) -> int:
    """Write a file whose last frame crosses a beacon, the frame's bytes after the beacon
    starting with ``continuation``; returns the beacon's offset."""
    with StreamWriter(path, beacon_interval=interval, created_at_ms=CREATED_AT_MS) as writer:
        for i in range(6):
            writer.append(KEYS[i % 2], b"m" * (40 + i), CREATED_AT_MS + i)
        boundary = (writer.offset // interval + 1) * interval
        before = boundary - writer.offset - (32 + len("orders") - 3)
        assert before > 0
        writer.append("orders", b"b" * before + continuation + b"end", CREATED_AT_MS + 9)
    return boundary


async def test_a_raised_marker_count_that_swallows_a_marker_shaped_continuation_is_refused(
    tmp_path: Path,
) -> None:
    """The beacon's count + 1 makes readers take the frame's next 40 bytes for a marker, so the
    frame seems to run past the end: a cut, were it not that no writer wrote that beacon."""
    path = tmp_path / "nasty.ss"
    boundary = _last_frame_across_a_beacon(path, b"abcdefghijklm" + bytes(26) + b"\r" + b"x" * 30)
    data = bytearray(path.read_bytes())
    assert data[boundary + 5] == 1
    data[boundary + 5] = 2
    for how in PATHS:
        damaged = tmp_path / f"{how}.ss"
        damaged.write_bytes(data)
        assert await open_for_writing(how, damaged) == "refused", how


async def test_a_raised_count_in_the_last_of_several_beacons_of_a_cut_frame_is_refused(
    tmp_path: Path,
) -> None:
    """The first beacons of a long frame agree with its length; the last one, damaged, makes it
    seem to run past the end. Every beacon in the tail is checked, not only the first."""
    path = tmp_path / "long.ss"
    marker_like = b"abcdefghijklm" + bytes(26) + b"\r"

    def write(payload: bytes) -> None:
        path.unlink(missing_ok=True)
        with StreamWriter(path, beacon_interval=1024, created_at_ms=CREATED_AT_MS) as writer:
            writer.append("orders", b"first", CREATED_AT_MS)
            writer.append("audit.log", b"second", CREATED_AT_MS + 1)
            writer.append("orders", payload, CREATED_AT_MS + 2)

    size = 3000
    write(bytes(size))
    last = frames_of(path)[-1]
    ends = last.positions[-1]
    boundaries = [b for b in range(1024, ends, 1024) if b > last.offset]
    assert len(boundaries) >= 2
    after_last_beacon = next(i for i, at in enumerate(last.positions) if at > boundaries[-1])
    payload_index = after_last_beacon - last.field("payload")[0]
    assert 0 < payload_index < size - len(marker_like)
    write(bytes(payload_index) + marker_like + bytes(size - payload_index - len(marker_like)))
    data = bytearray(path.read_bytes())
    assert data[boundaries[-1] + 5] == 1
    data[boundaries[-1] + 5] = 2
    assert await every_path(tmp_path, bytes(data)) == {"refused"}


def test_a_beacon_marker_naming_a_stream_the_file_does_not_hold_proves_nothing(
    tmp_path: Path,
) -> None:
    """Even where the count is within bounds, a marker must name a stream written before."""
    from trio_streams.file.repair import check_cut_tail

    path = tmp_path / "nasty.ss"
    continuation = b"abcdefghijklm" + bytes(26) + b"\r" + b"x" * 30
    boundary = _last_frame_across_a_beacon(path, continuation, interval=2048)
    data = bytearray(path.read_bytes())
    assert data[boundary + 5] == 2  # both streams; 3 would fit at this interval
    data[boundary + 5] = 3
    path.write_bytes(data)
    start = max(f for f in _frame_offsets(path) if f < boundary)
    fd = os.open(path, os.O_RDONLY)
    try:
        read = lambda offset, n: os.pread(fd, n, offset)  # noqa: E731
        # A third stream, so three markers are allowed; the third is no marker a writer wrote.
        streams = {("orders", 0): (4, CREATED_AT_MS + 9), ("audit.log", 0): (3, CREATED_AT_MS + 9)}
        streams |= {("other", 0): (1, CREATED_AT_MS)}
        with pytest.raises(UnprovenTailError, match="names stream b'abcdefghijklm'"):
            check_cut_tail(read, 2048, start, len(data), path=str(path), streams=streams)
        del streams[("other", 0)]
        with pytest.raises(UnprovenTailError, match="a beacon with 3 markers"):
            check_cut_tail(read, 2048, start, len(data), path=str(path), streams=streams)
    finally:
        os.close(fd)


def _frame_offsets(path: Path) -> list[int]:
    """Offsets of the frames a reader decodes before the damage."""
    out = []
    with FileReader(path) as reader:
        try:
            for message in reader:
                out.append(message.offset)
        except StreamFormatError:
            pass
    return out


async def test_a_cut_frame_whose_payload_holds_a_whole_frame_is_refused_to_be_safe(
    tmp_path: Path,
) -> None:
    """A frame inside the tail might be a message: the writer cannot tell, so it refuses."""
    inner = encode_frame(encode_key("inner"), 0, 7, CREATED_AT_MS, b"hi")
    path = tmp_path / "nested.ss"
    with StreamWriter(path, created_at_ms=CREATED_AT_MS) as writer:
        writer.append("orders", b"first", CREATED_AT_MS)
        writer.append("orders", b"<" + inner + b">" * 40, CREATED_AT_MS + 1)
    data = path.read_bytes()
    assert await every_path(tmp_path, data[:-20]) == {"refused"}
    path.write_bytes(data[:-60])  # cut before the inner frame ends: provably cut
    assert await open_for_writing_after_cut("StreamWriter", path) == "appended"
