"""``trio-streams file write`` checks its whole input before it writes: all or nothing, and the
sequence numbers of each stream follow each other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trio_streams.file.reader import FileReader

from .support import cli, stderr_lines, stream_file

RULE = "the sequence numbers of a stream start at 1 (or 0) and follow each other"


def line(key: str, seq: int, payload: str = "x", **extra: Any) -> str:
    return json.dumps(
        {"stream_key": key, "seq": seq, "timestamp_ms": 1_700_000_000_000 + seq}
        | {"payload": payload}
        | extra
    )


def write(target: Path, *lines: str) -> tuple[int, list[str]]:
    result = cli("file", "write", str(target), stdin="".join(f"{text}\n" for text in lines))
    assert "Traceback" not in result.stderr
    return result.returncode, stderr_lines(result)


def payloads(path: Path) -> list[bytes]:
    with FileReader(path) as reader:
        return [message.payload for message in reader]


def test_a_bad_line_3_writes_nothing_to_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "new.ss"
    code, errors = write(target, line("orders", 1), line("orders", 2), '{"stream_key": "orders"}')
    assert code == 1
    assert errors == ["trio-streams file write: error: line 3: bad message: no 'seq' field"]
    assert not target.exists()


def test_a_bad_line_3_leaves_an_existing_file_as_it_was(tmp_path: Path) -> None:
    target = stream_file(tmp_path / "old.ss", 2)
    before = target.read_bytes()
    code, errors = write(target, line("orders", 3), line("orders", 4), "not json")
    assert code == 1
    assert errors[0].startswith("trio-streams file write: error: line 3: not JSON")
    assert target.read_bytes() == before


def test_duplicate_sequence_numbers_of_a_stream_are_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    target = tmp_path / "dup.ss"
    code, errors = write(target, line("orders", 1), line("audit", 1), line("orders", 1))
    assert code == 1
    assert errors == [
        "trio-streams file write: error: "
        "line 3: seq 1 of stream 'orders' repeats seq 1 on line 1: " + RULE
    ]
    assert not target.exists()


def test_decreasing_sequence_numbers_of_a_stream_are_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    target = tmp_path / "down.ss"
    code, errors = write(target, line("orders", 1), line("orders", 2), line("orders", 1))
    assert code == 1
    assert errors == [
        "trio-streams file write: error: "
        "line 3: seq 1 of stream 'orders' comes after seq 2 on line 2: " + RULE
    ]
    assert not target.exists()


def test_a_gap_in_the_sequence_numbers_of_a_stream_is_refused_naming_both_lines(
    tmp_path: Path,
) -> None:
    # Readers hold a stream's sequence numbers to following each other.
    target = tmp_path / "gap.ss"
    code, errors = write(target, line("orders", 1), line("orders", 2), line("orders", 4))
    assert code == 1
    assert errors == [
        "trio-streams file write: error: "
        "line 3: seq 4 of stream 'orders' does not follow seq 2 on line 2: " + RULE
    ]
    assert not target.exists()


def test_a_stream_new_to_the_file_starting_above_1_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "late.ss"
    code, errors = write(target, line("orders", 100), line("orders", 101))
    assert code == 1
    assert errors == [
        "trio-streams file write: error: "
        f"line 1: seq 100 would be the first of stream 'orders' in {target}: " + RULE + "; "
        "nothing was written"
    ]
    assert not target.exists()


def test_a_seq_that_does_not_follow_the_files_own_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    target = stream_file(tmp_path / "old.ss", 3)  # orders 1..3
    before = target.read_bytes()
    code, errors = write(target, line("audit", 1), line("orders", 3))
    assert code == 1
    assert errors == [
        f"trio-streams file write: error: "
        f"line 2: seq 3 of stream 'orders' does not follow seq 3, the last of that "
        f"stream in {target}: " + RULE + "; nothing was written"
    ]
    assert target.read_bytes() == before


def test_streams_and_shards_each_have_their_own_sequence(tmp_path: Path) -> None:
    target = stream_file(tmp_path / "old.ss", 3)
    code, errors = write(
        target,
        line("orders", 4, "d"),
        line("audit", 1, "a"),
        line("orders", 1, "shard 1", shard=1),
        line("orders", 5, "e"),
    )
    assert (code, errors) == (0, [])
    assert payloads(target) == [b"1", b"1", b"1", b"d", b"a", b"shard 1", b"e"]


@pytest.mark.slow
def test_what_the_format_cannot_hold_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    target = tmp_path / "new.ss"
    cases = {
        line("orders/dead", 3): "trio-streams file write: error: "
        "line 3: invalid stream key 'orders/dead'",
        line("orders", 3, timestamp_ms=-1): "trio-streams file write: error: "
        "line 3: timestamp -1 ms outside",
        line("orders", 3, shard=-1): "trio-streams file write: error: "
        "line 3: shard -1 or seq 3 outside u64",
        line("orders", 3).replace('"seq": 3', '"seq": "3"'): (
            "trio-streams file write: error: line 3: bad message: seq must be an integer"
        ),
        line("orders", 3, "%%%", encoding="base64"): "trio-streams file write: error: "
        "line 3: bad message",
        line("orders", 3, encoding="rot13"): "trio-streams file write: error: "
        "line 3: bad message: encoding must be",
    }
    for bad, message in cases.items():
        code, errors = write(target, line("orders", 1), line("orders", 2), bad)
        assert code == 1, bad
        assert len(errors) == 1 and errors[0].startswith(message), (bad, errors)
        assert not target.exists()


def test_internal_messages_keep_sequence_number_0(tmp_path: Path) -> None:
    target = tmp_path / "internal.ss"
    internal = "SEA_STREAMER_INTERNAL"
    code, errors = write(
        target, line("k", 1), line(internal, 0, "not-EOS"), line("k", 2), line(internal, 0, "x")
    )
    assert (code, errors) == (0, [])


def test_the_help_says_the_input_is_read_whole() -> None:
    result = cli("file", "write", "--help")
    text = " ".join(result.stdout.split())
    assert "The whole input is read into memory and checked first" in text
    assert "all or nothing" in text


def test_a_beacon_interval_the_format_refuses_is_refused_at_parse_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    target = tmp_path / "new.ss"
    result = cli("file", "write", str(target), "--beacon-interval", "10", stdin=line("a", 1))
    assert result.returncode == 2
    assert "argument --beacon-interval: must be 128..2**32-1 bytes, not 10" in result.stderr
    assert not target.exists()


def test_a_header_line_the_format_refuses_is_refused_naming_the_line(tmp_path: Path) -> None:
    target = tmp_path / "new.ss"
    header = json.dumps(
        {"file_header": {"file_name": "x", "created_at_ms": 1, "beacon_interval": 0}}
    )
    code, errors = write(target, header, line("a", 1))
    assert code == 1
    assert errors == [
        "trio-streams file write: error: "
        "line 1: bad file_header: beacon interval 0 outside 128..2**32-1"
    ]
    assert not target.exists()


def test_a_header_option_the_format_refuses_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new.ss"
    result = cli("file", "write", str(target), "--created-at-ms", "-5", stdin=line("a", 1))
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "trio-streams file write: error: timestamp -5 ms is before 1970"
    ]
    assert not target.exists()
