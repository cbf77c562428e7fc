"""A stream key named on the command line that the file does not hold is an error, exit 1,
one line listing the keys the file does hold, the closest first."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.support import cli, stderr_lines
from trio_streams.core.names import NameNotFound, check_names
from trio_streams.file.keys import check_file_keys
from trio_streams.file.writer import StreamWriter


def _refused(result: subprocess.CompletedProcess[str], line: str) -> None:
    """Exit status 1, nothing printed, and ``line`` alone on stderr."""
    assert result.returncode == 1
    assert result.stdout == ""
    assert stderr_lines(result) == [line]


def _file(path: Path, *keys: str) -> Path:
    with StreamWriter(path) as writer:
        for key in keys:
            writer.append(key, b"1")
    return path


def test_decode_of_a_key_the_file_does_not_hold_exits_1_listing_the_keys_there(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "f.ss", "audit", "orders", "orders.dead")
    result = cli("file", "decode", str(path), "--key", "ordres")
    _refused(
        result,
        f"trio-streams file decode: error: "
        f"no stream key 'ordres' in {path}; there: 'orders', 'orders.dead', 'audit'",
    )


def test_decode_prints_nothing_when_one_of_several_keys_is_not_there(tmp_path: Path) -> None:
    path = _file(tmp_path / "f.ss", "orders", "audit")
    result = cli("file", "decode", str(path), "--key", "orders", "--key", "nosuch")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "no stream key 'nosuch'" in result.stderr


def test_decode_of_keys_that_are_there_and_of_the_internal_key_still_works(tmp_path: Path) -> None:
    path = _file(tmp_path / "f.ss", "orders", "audit")
    result = cli("file", "decode", str(path), "--key", "audit")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1
    result = cli("file", "decode", str(path), "--key", "SEA_STREAMER_INTERNAL")
    assert result.returncode == 0, result.stderr


def test_a_file_without_messages_says_it_has_no_keys(tmp_path: Path) -> None:
    path = tmp_path / "empty.ss"
    StreamWriter(path).close()
    with pytest.raises(
        NameNotFound, match=r"^no stream key 'orders' in .*empty\.ss, which has none$"
    ):
        check_file_keys(path, ["orders"])


def test_a_long_list_of_names_there_shows_the_ten_closest_and_counts_the_rest() -> None:
    present = [f"stream{n:02d}" for n in range(25)] + ["orders"]
    with pytest.raises(NameNotFound) as error:
        check_names("stream", ["ordres", "x"], present, "here")
    message = str(error.value)
    assert message.startswith("no streams 'ordres', 'x' in here; there: 'orders', ")
    assert message.endswith(" and 16 more")


def test_top_of_a_file_with_a_stream_it_does_not_hold_exits_1_listing_its_keys(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path / "f.ss", "orders", "audit")
    result = cli("top", str(path), "--once", "--interval", "0.01", "--stream", "ordres")
    _refused(
        result,
        f"trio-streams top: error: no stream key 'ordres' in {path}; there: 'orders', 'audit'",
    )


def test_top_of_a_file_with_a_stream_shows_that_key_only(tmp_path: Path) -> None:
    path = _file(tmp_path / "f.ss", "orders", "audit")
    result = cli("top", str(path), "--once", "--interval", "0.01", "--stream", "audit")
    assert result.returncode == 0, result.stderr
    rows = [line.split()[0] for line in result.stdout.splitlines()[4:] if line.strip()]
    assert rows == ["audit"]
