"""An empty stream key is refused wherever a key is given: the format could store the message,
but no subscription can read it (``FileStream("")`` is refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.support import cli, stderr_lines, stream_file
from tests.support import serving
from trio_streams.core.errors import ConfigurationError
from trio_streams.file import open_publisher
from trio_streams.file.errors import InvalidStreamKeyError
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .apps import file_app

EMPTY = "stream key '' is empty"


def _keys(path: Path) -> list[str]:
    with FileReader(path) as reader:
        return [message.stream_key for message in reader]


def test_publish_with_an_empty_key_is_a_usage_error_exit_2_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "new.ss"
    result = cli("publish", str(path), "", "{}")
    assert result.returncode == 2
    [error] = [line for line in stderr_lines(result) if "error" in line]
    assert f"argument KEY: {EMPTY}" in error
    assert "Traceback" not in result.stderr
    assert not path.exists()


def test_publish_with_a_key_the_format_cannot_hold_is_a_usage_error_too(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 1)
    result = cli("publish", str(path), "orders/eu", "{}")
    assert result.returncode == 2
    assert "argument KEY: stream key 'orders/eu' is not valid" in result.stderr
    assert _keys(path) == ["orders"]


def test_publish_ndjson_with_an_empty_key_publishes_nothing(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 1)
    lines = [{"stream_key": "orders", "payload": "1"}, {"stream_key": "", "payload": "2"}]
    result = cli(
        "publish", str(path), "--ndjson", stdin="".join(json.dumps(x) + "\n" for x in lines)
    )
    assert result.returncode == 1
    assert stderr_lines(result) == [
        f"trio-streams publish: error: "
        f"line 2: bad message: {EMPTY}: a stream key is 1 to 249 characters of "
        "[A-Za-z0-9._-]; nothing was published"
    ]
    assert _keys(path) == ["orders"]


def test_file_write_with_an_empty_key_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.ss"
    line = {"stream_key": "", "shard": 0, "seq": 1, "timestamp_ms": 5, "payload": "x"}
    result = cli("file", "write", str(path), stdin=json.dumps(line) + "\n")
    assert result.returncode == 1
    [error] = stderr_lines(result)
    assert error.startswith("trio-streams file write: error: line 1: invalid stream key ''")
    assert "Traceback" not in result.stderr
    assert not path.exists() or _keys(path) == []


def test_a_writer_refuses_an_empty_key(tmp_path: Path) -> None:
    with StreamWriter(tmp_path / "w.ss") as writer, pytest.raises(InvalidStreamKeyError):
        writer.append("", b"x")


async def test_open_publisher_refuses_an_empty_key(tmp_path: Path) -> None:
    path = tmp_path / "p.ss"
    async with open_publisher(path) as publisher:
        with pytest.raises(ConfigurationError, match=EMPTY):
            await publisher.publish("", {"n": 1})
    assert _keys(path) == []


async def test_broker_publish_refuses_an_empty_key(tmp_path: Path) -> None:
    path = tmp_path / "b.ss"
    app, broker = file_app(path)
    async with serving(app):
        with pytest.raises(ConfigurationError):
            await broker.publish("", {"n": 1})
    assert not path.exists()  # a refused first publish creates no file
