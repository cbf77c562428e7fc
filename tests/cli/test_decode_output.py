"""``file decode`` prints what it printed when it wrote each message on its own line by line.

The lines are now built a batch at a time (:func:`trio_streams.cli.file.ndjson_lines`) and
written in one call per batch. The reference here is the former way, kept as the definition of
the output: ``json.dumps(message_to_json(m))`` (``format_log(m)`` for the log format) for each
message iterating the reader gives, then the end-of-stream message, with whatever error the
reader raised after the messages before it.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trio_streams.cli.commands import main as cli_main
from trio_streams.cli.file import (
    format_log,
    header_to_json,
    message_to_json,
    ndjson_lines,
    printer,
)
from trio_streams.file.errors import StreamFileError
from trio_streams.file.format import INTERNAL_KEY, Message
from trio_streams.file.positions import parse_position
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

VECTORS = Path(__file__).resolve().parents[1] / "data" / "vectors"
ALL_SS = sorted(VECTORS.glob("*.ss"))

#: Payloads whose JSON is not the bytes as they are: escapes, non-ASCII, not UTF-8 at all.
NASTY_PAYLOADS = [
    b"",
    b"plain ascii",
    "é ü 漢字 ∑".encode(),
    "😀 a character outside the BMP".encode(),
    b"\x00\x01\x1f\x7f controls and DEL",
    b'"quotes" \\backslashes\\ /slash',
    "\u2028\u2029 line separators".encode(),
    b"\n\r\t\b\f",
    b"\xff\xfe not UTF-8",
    b"\xed\xa0\x80 a surrogate encoded",
    b"rs1:" + b"x" * 40,
    bytes(range(256)),
    b"a" * 3_000,
]


def _old_line(fmt: str) -> Callable[[Message], str]:
    if fmt == "ndjson":
        return lambda m: json.dumps(message_to_json(m)) + "\n"
    return lambda m: format_log(m) + "\n"


def old_decode(
    path: Path,
    *,
    fmt: str = "ndjson",
    keys: list[str] | None = None,
    header: bool = True,
    start: str = "beginning",
) -> tuple[str, StreamFileError | None]:
    """What ``file decode`` printed before it wrote in batches, and the error it stopped on."""
    line = _old_line(fmt)
    out = io.StringIO()
    internal = keys is None or INTERNAL_KEY in keys
    try:
        with FileReader(path, keys=keys, internal=internal) as reader:
            if fmt == "ndjson" and header:
                out.write(json.dumps(header_to_json(reader.header)) + "\n")
            if start != "beginning":
                reader.seek(parse_position(start), key=keys[0] if keys else None)
            for message in reader:
                out.write(line(message))
            if reader.eos is not None:
                out.write(line(reader.eos))
    except StreamFileError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def new_decode(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> tuple[str, int]:
    capsys.readouterr()
    status = cli_main(["file", "decode", *args, str(path)])
    return capsys.readouterr().out, status


def nasty_file(path: Path) -> Path:
    """Every nasty payload on two keys and two shards, more messages than one batch holds (the
    reader's iteration reads 4096 at a time), internal messages, and an end-of-stream."""
    with StreamWriter(path, created_at_ms=1_700_000_000_000) as writer:
        seqs: dict[tuple[str, int], int] = {}
        for n in range(9_000):
            key = ("orders", "pay.ments-2")[n % 2]
            shard = (n // 2) % 2
            seq = seqs[key, shard] = seqs.get((key, shard), 0) + 1
            payload = NASTY_PAYLOADS[n % len(NASTY_PAYLOADS)] if n % 97 else b"%d" % n
            writer.write_message(key, shard, seq, 1_700_000_000_000 + n, payload)
        writer.write_message("orders", 0, seqs["orders", 0] + 1, 1_700_000_009_000, b"b" * 300_000)
        writer.write_message(INTERNAL_KEY, 0, 1, 1_700_000_009_000, b"an internal message")
        writer.close(eos=True, eos_timestamp_ms=1_700_000_009_001)
    return path


@pytest.mark.parametrize("vector", ALL_SS, ids=lambda p: p.name)
@pytest.mark.parametrize("fmt", ["ndjson", "log"])
def test_decode_prints_each_vector_as_it_did_line_by_line(
    capsys: pytest.CaptureFixture[str], vector: Path, fmt: str
) -> None:
    expected, error = old_decode(vector, fmt=fmt)
    out, status = new_decode(capsys, vector, "--format", fmt)
    assert out == expected
    assert status == (0 if error is None else 1)


@pytest.mark.parametrize("fmt", ["ndjson", "log"])
def test_decode_prints_nasty_payloads_over_many_batches_as_it_did(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str
) -> None:
    path = nasty_file(tmp_path / "nasty.ss")
    expected, error = old_decode(path, fmt=fmt)
    assert error is None and expected.count("\n") > 9_001
    out, status = new_decode(capsys, path, "--format", fmt)
    assert status == 0
    assert out == expected


@pytest.mark.parametrize(
    ("args", "keys", "header", "start"),
    [
        (["--no-header"], None, False, "beginning"),
        (["--key", "orders"], ["orders"], True, "beginning"),
        (["--key", "orders", "--key", INTERNAL_KEY], ["orders", INTERNAL_KEY], True, "beginning"),
        (["--key", "orders", "--from", "seq:1500"], ["orders"], True, "seq:1500"),
        (["--key", "orders", "--from", "ts:1700000007000"], ["orders"], True, "ts:1700000007000"),
        (["--from", "end"], None, True, "end"),
    ],
)
def test_decode_with_keys_a_start_or_no_header_prints_as_it_did(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: list[str],
    keys: list[str] | None,
    header: bool,
    start: str,
) -> None:
    path = nasty_file(tmp_path / "nasty.ss")
    expected, error = old_decode(path, keys=keys, header=header, start=start)
    assert error is None
    out, status = new_decode(capsys, path, "--format", "ndjson", *args)
    assert (out, status) == (expected, 0)


@pytest.mark.parametrize("cut", ["truncated", "corrupt"])
def test_a_damaged_file_prints_the_messages_before_the_damage_then_fails_as_it_did(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cut: str
) -> None:
    path = tmp_path / "damaged.ss"
    with StreamWriter(path, created_at_ms=1_700_000_000_000) as writer:
        offsets = [
            writer.append("orders", b"payload %d" % n, 1_700_000_000_000)[2] for n in range(6000)
        ]
    middle = offsets[5000]
    data = bytearray(path.read_bytes())
    if cut == "truncated":
        data = data[: len(data) - 20]
    else:
        data[middle + 60] ^= 0xFF  # inside the frame's payload: its checksum no longer holds
    path.write_bytes(bytes(data))
    expected, error = old_decode(path)
    assert error is not None and expected.count("\n") > 4096  # damage after the first batch
    out, status = new_decode(capsys, path, "--format", "ndjson")
    assert (out, status) == (expected, 1)


def test_the_tail_printer_prints_each_message_as_json_dumps_did() -> None:
    out = io.StringIO()
    emit = printer("ndjson", out)
    messages = [
        Message("k.ey-1", shard, seq, 1_700_000_000_000 + seq, payload, 128)
        for seq, payload in enumerate(NASTY_PAYLOADS, 1)
        for shard in (0, 7)
    ]
    for message in messages:
        emit(message)
    assert out.getvalue() == "".join(json.dumps(message_to_json(m)) + "\n" for m in messages)
    assert ndjson_lines(messages, {}) == out.getvalue()


def test_decode_writes_a_batch_of_lines_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """9,001 messages and the end-of-stream come out in a handful of writes, not one a line."""
    path = nasty_file(tmp_path / "nasty.ss")
    writes: list[str] = []

    class Counting(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stdout", Counting())
    assert cli_main(["file", "decode", "--format", "ndjson", str(path)]) == 0
    assert sum(text.count("\n") for text in writes) == 1 + 9_001 + 2  # header, internal, EOS
    assert len(writes) <= 6
