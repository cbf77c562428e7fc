"""The contract: every vector decodes to its ndjson, and its ndjson encodes to it byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trio_streams.file.decoder import FrameDecoder
from trio_streams.file.format import INTERNAL_KEY, decode_header
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .conftest import ALL_SS, CREATED_AT_MS, DESCRIBED, EOS_TIMESTAMP_MS, Vector, as_tuple


def _decoded(path: Path) -> list[tuple[str, int, int, int, bytes]]:
    with FileReader(path, internal=True) as reader:
        return [(m.stream_key, m.shard, m.seq, m.timestamp_ms, m.payload) for m in reader]


@pytest.mark.parametrize("vector", DESCRIBED, ids=lambda v: v.name)
def test_decodes_to_its_ndjson(vector: Vector) -> None:
    assert _decoded(vector.path) == vector.messages()
    with FileReader(vector.path, internal=True) as reader:
        list(reader)
        assert (reader.eos is not None) == vector.eos
        if vector.eos:
            assert reader.eos is not None
            assert reader.eos.timestamp_ms == EOS_TIMESTAMP_MS
            assert reader.eos.stream_key == INTERNAL_KEY


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL_SS, ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_decoding_does_not_depend_on_how_bytes_arrive(path: Path, chunk: int) -> None:
    data = path.read_bytes()
    header = decode_header(data)
    whole = FrameDecoder(header.beacon_interval)
    whole.feed(data[128:])
    expected = whole.next_messages(10**9)
    pieces = FrameDecoder(header.beacon_interval)
    got = []
    for start in range(128, len(data), chunk):
        pieces.feed(data[start : start + chunk])
        got.extend(pieces.next_messages(10**9))
    pieces.check_finished()
    assert got == expected
    assert pieces.eos == whole.eos


def test_upstream_samples_decode() -> None:
    consumer = _decoded(Path(ALL_SS[0]).parent / "consumer.ss")
    assert [m[2] for m in consumer] == list(range(100))
    assert {(m[0], m[1]) for m in consumer} == {("hello", 1)}
    assert consumer[0][4] == b"hello-0"
    sample = _decoded(Path(ALL_SS[0]).parent / "sample-1.ss")
    assert len(sample) == 27
    assert {m[0] for m in sample} == {"file", "breakpoint", "event"}


def _write(vector: Vector, target: Path) -> None:
    with StreamWriter(
        target, beacon_interval=vector.beacon_interval, created_at_ms=CREATED_AT_MS
    ) as writer:
        for key, shard, seq, ts, payload in vector.messages():
            writer.write_message(key, shard, seq, ts, payload)
        if vector.eos:
            writer.write_eos(EOS_TIMESTAMP_MS)


@pytest.mark.parametrize("vector", DESCRIBED, ids=lambda v: v.name)
def test_ndjson_encodes_to_the_vector_byte_for_byte(vector: Vector, tmp_path: Path) -> None:
    target = tmp_path / vector.path.name
    _write(vector, target)
    assert target.read_bytes() == vector.path.read_bytes()


#: Vectors a producer could have written: no internal messages (their seq is not the next one).
PRODUCED = [v for v in DESCRIBED if all(m[0] != INTERNAL_KEY for m in v.messages())]


@pytest.mark.parametrize("vector", PRODUCED, ids=lambda v: v.name)
def test_producer_appends_reproduce_the_vector(vector: Vector, tmp_path: Path) -> None:
    """Seqs 1.. per key on shard 0 are what ``append`` assigns, so it writes the same bytes."""
    target = tmp_path / vector.path.name
    writer = StreamWriter(
        target, beacon_interval=vector.beacon_interval, created_at_ms=CREATED_AT_MS
    )
    for key, _, seq, ts, payload in vector.messages():
        assert writer.append(key, payload, ts)[:2] == (seq, ts)
    writer.close(eos=vector.eos, eos_timestamp_ms=EOS_TIMESTAMP_MS)
    assert target.read_bytes() == vector.path.read_bytes()


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "trio_streams", "file", *args],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("vector", DESCRIBED, ids=lambda v: v.name)
def test_cli_write_and_decode_round_trip(vector: Vector, tmp_path: Path) -> None:
    target = tmp_path / vector.path.name
    eos = ["--eos", "--eos-timestamp-ms", str(EOS_TIMESTAMP_MS)] if vector.eos else []
    written = _cli(
        "write",
        str(target),
        "--beacon-interval",
        str(vector.beacon_interval),
        "--created-at-ms",
        str(CREATED_AT_MS),
        *eos,
        stdin=vector.ndjson.read_bytes(),
    )
    assert written.returncode == 0, written.stderr
    assert target.read_bytes() == vector.path.read_bytes()
    decoded = _cli("decode", "--format", "ndjson", str(vector.path))
    assert decoded.returncode == 0, decoded.stderr
    header, *rows = [json.loads(line) for line in decoded.stdout.splitlines()]
    assert header == {
        "file_header": {
            "file_name": vector.path.name,
            "created_at_ms": CREATED_AT_MS,
            "beacon_interval": vector.beacon_interval,
        }
    }
    eos_row = [(INTERNAL_KEY, 0, 0, EOS_TIMESTAMP_MS, b"EOS")] if vector.eos else []
    assert [as_tuple(row) for row in rows] == vector.messages() + eos_row
