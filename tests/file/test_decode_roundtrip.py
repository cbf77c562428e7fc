"""``file decode --format ndjson | file write`` gives the file back byte for byte.

Decode prints the header first, then every message — internal ones that are not EOS too — and,
last, the end-of-stream message it stops at (an EOS that stays in the file ends decoding).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trio_streams.cli.commands import main as cli_main
from trio_streams.file.format import INTERNAL_KEY, decode_header
from trio_streams.file.reader import FileReader

from .conftest import ALL_SS, EOS_TIMESTAMP_MS, VECTORS, as_tuple

REPO = Path(__file__).resolve().parents[2]
INTERNAL_MSG = VECTORS / "internal-msg.ss"
MID_FILE_EOS = VECTORS / "eos-mid-file-short.ss"
ONE_KEY = VECTORS / "one-key-1024.ss"


def decode(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert cli_main(["file", "decode", *args]) == 0
    return capsys.readouterr().out


def write(monkeypatch: pytest.MonkeyPatch, target: Path, text: str, *args: str) -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    return cli_main(["file", "write", str(target), *args])


def rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def end_of_first_eos(path: Path) -> int:
    """The file offset just past the first EOS (the file's end if there is none)."""
    with FileReader(path) as reader:
        list(reader)
        return len(path.read_bytes()) if reader.eos is None else reader.eos.offset + 56


def test_decode_prints_internal_messages_that_are_not_eos(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, *messages = rows(decode(capsys, "--format", "ndjson", str(INTERNAL_MSG)))
    expected = [
        json.loads(line)
        for line in INTERNAL_MSG.with_suffix(".ndjson").read_text().split("\n")
        if line
    ]
    assert messages == expected
    assert messages[1]["stream_key"] == INTERNAL_KEY and messages[1]["payload"] == "not-EOS"


def test_decode_prints_the_eos_it_stops_at_with_its_timestamp(
    capsys: pytest.CaptureFixture[str],
) -> None:
    *_, last = rows(decode(capsys, "--format", "ndjson", str(ONE_KEY)))
    assert as_tuple(last) == (INTERNAL_KEY, 0, 0, EOS_TIMESTAMP_MS, b"EOS")


@pytest.mark.parametrize("vector", ALL_SS, ids=lambda p: p.name)
def test_decode_then_write_gives_every_vector_back_byte_for_byte(
    vector: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown = decode(capsys, "--format", "ndjson", str(vector))
    target = tmp_path / "copy.ss"  # another name: the header line carries the original's
    assert write(monkeypatch, target, shown) == 0
    assert target.read_bytes() == vector.read_bytes()[: end_of_first_eos(vector)]


@pytest.mark.slow
@pytest.mark.parametrize("vector", [ONE_KEY, VECTORS / "sample-1.ss"], ids=lambda p: p.name)
def test_decode_piped_into_write_in_real_processes_gives_the_file_back(
    vector: Path, tmp_path: Path
) -> None:
    target = tmp_path / "copy.ss"
    command = [sys.executable, "-m", "trio_streams", "file"]
    with subprocess.Popen(
        [*command, "decode", "--format", "ndjson", str(vector)], stdout=subprocess.PIPE, cwd=REPO
    ) as decoding:
        written = subprocess.run(
            [*command, "write", str(target)],
            stdin=decoding.stdout,
            capture_output=True,
            check=False,
            timeout=60,
            cwd=REPO,
        )
    assert decoding.returncode == 0
    assert written.returncode == 0, written.stderr
    assert target.read_bytes() == vector.read_bytes()  # one-key-1024: 52,481 bytes, EOS and all


def test_the_header_line_carries_file_name_created_at_and_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for vector in (VECTORS / "consumer.ss", VECTORS / "sample-1.ss", MID_FILE_EOS):
        first = rows(decode(capsys, "--format", "ndjson", str(vector)))[0]
        header = decode_header(vector.read_bytes()[:128])
        assert first == {
            "file_header": {
                "file_name": header.file_name,
                "created_at_ms": header.created_at_ms,
                "beacon_interval": header.beacon_interval,
            }
        }


def test_write_options_win_over_the_header_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = decode(capsys, "--format", "ndjson", str(VECTORS / "consumer.ss"))
    target = tmp_path / "other.ss"
    options = ["--beacon-interval", "2048", "--created-at-ms", "5", "--file-name", "x.ss"]
    assert write(monkeypatch, target, shown, *options) == 0
    assert decode_header(target.read_bytes()[:128]) == ("x.ss", 5, 2048)
    with FileReader(target) as copy, FileReader(VECTORS / "consumer.ss") as original:
        assert [m[:5] for m in copy] == [m[:5] for m in original]


def test_decode_stops_at_an_eos_in_the_middle_and_prints_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, *messages = rows(decode(capsys, "--format", "ndjson", str(MID_FILE_EOS)))
    assert len(messages) == 101
    assert [m["seq"] for m in messages[:100]] == list(range(1, 101))
    assert messages[-1]["stream_key"] == INTERNAL_KEY and messages[-1]["payload"] == "EOS"
    log = decode(capsys, str(MID_FILE_EOS)).splitlines()
    assert len(log) == 101 and f" {INTERNAL_KEY} #0 " in log[-1] and log[-1].endswith(" EOS")


def test_a_file_header_line_after_a_message_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    header, first, *rest = decode(capsys, "--format", "ndjson", str(ONE_KEY)).splitlines()
    target = tmp_path / "t.ss"
    with pytest.raises(SystemExit, match="line 2: a file_header line must come first"):
        write(monkeypatch, target, "\n".join([first, header, *rest]))


def test_a_key_filter_leaves_internal_messages_out_but_not_the_eos(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, *messages = rows(decode(capsys, "--format", "ndjson", "--key", "k", str(INTERNAL_MSG)))
    assert [m["payload"] for m in messages] == ["one", "two"]
    _, *messages = rows(decode(capsys, "--format", "ndjson", "--key", "orders", str(ONE_KEY)))
    assert len(messages) == 201 and messages[-1]["payload"] == "EOS"
    _, *internal = rows(
        decode(capsys, "--format", "ndjson", "--key", INTERNAL_KEY, str(INTERNAL_MSG))
    )
    assert [m["payload"] for m in internal] == ["not-EOS"]


def test_no_header_leaves_out_the_header_line(capsys: pytest.CaptureFixture[str]) -> None:
    shown = rows(decode(capsys, "--format", "ndjson", "--no-header", str(INTERNAL_MSG)))
    assert [m["payload"] for m in shown] == ["one", "not-EOS", "two"]
