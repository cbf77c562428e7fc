"""``trio-streams publish``: payloads from an argument, a file or stdin; headers; ndjson; receipts;
and a service that consumes the file (retries, a dead letter) while scripts publish to it."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio

from tests.file.many_writers import reencoded
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader

from .support import COMMAND, ROOT, cli, stderr_lines, stream_file


def _messages(path: Path) -> list[tuple[str, int, bytes, Mapping[str, str]]]:
    with FileReader(path) as reader:
        return [(m.stream_key, m.seq, *open_envelope(m.payload)) for m in reader]


@pytest.mark.slow
def test_publish_a_payload_argument_prints_its_receipt(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 2)
    result = cli("publish", str(path), "orders", '{"id": 7}')
    assert result.returncode == 0, result.stderr
    key, seq, ts, offset = result.stdout.split()
    assert (key, seq) == ("orders", "seq:3")
    assert ts.startswith("ts:") and offset.startswith("offset:")
    assert _messages(path)[-1] == ("orders", 3, b'{"id": 7}', {})


@pytest.mark.slow
def test_publish_reads_the_payload_from_stdin_or_a_file_as_bytes(tmp_path: Path) -> None:
    path = tmp_path / "new.ss"
    assert cli("publish", str(path), "k", stdin="from stdin\n").returncode == 0
    payload = tmp_path / "payload.bin"
    payload.write_bytes(bytes(range(256)))
    assert cli("publish", str(path), "k", "--file", str(payload)).returncode == 0
    assert [m[2] for m in _messages(path)] == [b"from stdin\n", bytes(range(256))]


def test_publish_headers_reach_the_handlers_envelope(tmp_path: Path) -> None:
    path = tmp_path / "h.ss"
    result = cli("publish", str(path), "k", "x", "-H", "source=import", "-H", "trace=a=b")
    assert result.returncode == 0, result.stderr
    assert _messages(path) == [("k", 1, b"x", {"source": "import", "trace": "a=b"})]


@pytest.mark.slow
def test_publish_ndjson_takes_the_file_write_schema_and_prints_a_receipt_a_line(
    tmp_path: Path,
) -> None:
    source = stream_file(tmp_path / "source.ss", 3, key="a")
    decoded = cli("file", "decode", str(source), "--format", "ndjson")
    path = stream_file(tmp_path / "target.ss", 2, key="a")
    extra = json.dumps({"payload": "aGk=", "encoding": "base64", "headers": {"h": "1"}})
    result = cli("publish", str(path), "b", "--ndjson", stdin=decoded.stdout + extra + "\n")
    assert result.returncode == 0, result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["a", "seq:3"],
        ["a", "seq:4"],
        ["a", "seq:5"],
        ["b", "seq:1"],
    ]
    assert _messages(path)[-1] == ("b", 1, b"hi", {"h": "1"})


def test_a_bad_ndjson_line_publishes_nothing(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 1)
    before = path.read_bytes()
    lines = '{"payload": "ok"}\n{"payload": "bad", "stream_key": "no spaces"}\n'
    result = cli("publish", str(path), "orders", "--ndjson", stdin=lines)
    assert result.returncode == 1
    assert result.stderr.startswith("trio-streams publish: error: line 2: bad message:")
    assert "nothing was published" in result.stderr
    assert path.read_bytes() == before


def test_a_redis_target_that_cannot_be_reached_is_named_with_its_password_masked() -> None:
    result = cli("publish", "redis://app:s3cret@127.0.0.1:1/0", "orders", "x")
    assert result.returncode == 1
    assert "s3cret" not in result.stderr
    assert result.stderr.startswith(
        "trio-streams publish: error: cannot publish to redis://app:***@127.0.0.1:1/0: "
    )


def test_publish_without_a_key_says_so_as_a_bad_command_line(tmp_path: Path) -> None:
    result = cli("publish", str(tmp_path / "k.ss"))
    assert result.returncode == 2
    assert "KEY is needed" in result.stderr


def test_a_reserved_key_is_refused_as_a_bad_command_line(tmp_path: Path) -> None:
    result = cli("publish", str(tmp_path / "k.ss"), "SEA_STREAMER_INTERNAL", "x")
    assert result.returncode == 2
    assert "reserved" in result.stderr
    assert not (tmp_path / "k.ss").exists()


# -- a service and scripts on one file ----------------------------------------------------------

#: Orders published by scripts: (id, deliveries that fail). 2 fails once, 3 runs out of attempts.
ORDERS = [(n, {2: 1, 3: 5}.get(n % 10, 0)) for n in range(1, 121)]


async def _publish(path: Path, orders: list[tuple[int, int]], *, ndjson: bool) -> None:
    base = [*COMMAND, "publish", str(path), "orders"]
    if ndjson:
        lines = "".join(json.dumps({"payload": json.dumps({"id": n, "fail": f})}) + "\n"
                        for n, f in orders)  # fmt: skip
        result = await trio.run_process(
            [*base, "--ndjson"], stdin=lines.encode(), capture_stdout=True, cwd=ROOT
        )
        assert len(result.stdout.splitlines()) == len(orders)
        return
    for n, fail in orders:
        payload = json.dumps({"id": n, "fail": fail})
        result = await trio.run_process([*base, payload], capture_stdout=True, cwd=ROOT)
        assert result.stdout.startswith(b"orders seq:")


@pytest.mark.slow
async def test_a_service_consumes_with_retries_and_a_dead_letter_while_scripts_publish(
    tmp_path: Path,
) -> None:
    path = stream_file(tmp_path / "orders.ss", 0)
    env = {**os.environ, "STREAM_FILE": str(path)}
    log = tmp_path / "service.log"
    with log.open("wb") as stderr:
        service = await trio.lowlevel.open_process(
            [*COMMAND, "run", "tests.cli.apps:service"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
            env=env,
        )
    assert service.stdout is not None
    handled: Counter[int] = Counter()
    dead: list[int] = []
    expected_handled = {n: min(f, 2) + 1 for n, f in ORDERS}
    expected_dead = sorted(n for n, f in ORDERS if f >= 3)
    pending = b""
    try:
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                # Three scripts at once: one message per command, and two bulk ndjson feeds.
                nursery.start_soon(lambda: _publish(path, ORDERS[:20], ndjson=False))
                nursery.start_soon(lambda: _publish(path, ORDERS[20:70], ndjson=True))
                nursery.start_soon(lambda: _publish(path, ORDERS[70:], ndjson=True))
                while dict(handled) != expected_handled or sorted(dead) != expected_dead:
                    chunk = await service.stdout.receive_some()
                    assert chunk, "the service stopped"
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        what, n, *_ = line.split()
                        if what == b"dead":
                            dead.append(int(n))
                        else:
                            handled[int(n)] += 1
        service.send_signal(signal.SIGINT)
        with trio.fail_after(60):
            status = await service.wait()
    finally:
        if service.returncode is None:
            service.kill()
            await service.wait()
    errors = log.read_text()
    assert status == 0, errors
    assert "WriterLockedError" not in errors and "stopped:" not in errors
    assert sorted(dead) == expected_dead  # each dead letter once
    messages = _messages(path)
    orders = [m for m in messages if m[0] == "orders"]
    assert [m[1] for m in orders] == list(range(1, len(orders) + 1))
    retries = sum(min(f, 2) for _, f in ORDERS)
    assert len(orders) == len(ORDERS) + retries  # what the scripts sent, and the retry copies
    letters = [m for m in messages if m[0] == "orders.dead"]
    assert [m[3]["x-dead-letter-reason"] for m in letters] == ["max-attempts"] * len(letters)
    assert path.read_bytes() == reencoded(path)


@pytest.mark.slow
def test_decoded_messages_published_again_keep_their_payloads_and_headers(tmp_path: Path) -> None:
    first, second = tmp_path / "a.ss", tmp_path / "b.ss"
    assert cli("publish", str(first), "orders", "x", "-H", "trace=t1").returncode == 0
    decoded = cli("file", "decode", str(first), "--format", "ndjson")
    assert decoded.returncode == 0
    copied = cli("publish", str(second), "--ndjson", stdin=decoded.stdout)
    assert copied.returncode == 0, copied.stderr
    assert [(k, p, dict(h)) for k, _, p, h in _messages(second)] == [
        ("orders", b"x", {"trace": "t1"})
    ]


@pytest.mark.slow
def test_an_ndjson_payload_that_is_not_a_string_is_refused_and_nothing_published(
    tmp_path: Path,
) -> None:
    target = tmp_path / "o.ss"
    for payload in ('{"id": 1}', "null", "5"):
        result = cli("publish", str(target), "k", "--ndjson", stdin=f'{{"payload": {payload}}}\n')
        assert result.returncode == 1
        assert "payload must be a string" in result.stderr
        assert "nothing was published" in result.stderr
    assert not target.exists()


def test_an_empty_payload_from_stdin_is_refused_with_exit_2_and_nothing_published(
    tmp_path: Path,
) -> None:
    path = tmp_path / "k.ss"
    result = cli("publish", str(path), "k", stdin="")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams publish: error: the payload is empty; give one, or --allow-empty to "
        "publish it"
    ]
    assert not path.exists()


@pytest.mark.slow
@pytest.mark.parametrize("source", ["argument", "file"])
def test_an_empty_payload_argument_or_file_is_refused_too(tmp_path: Path, source: str) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    given = [""] if source == "argument" else ["--file", str(empty)]
    result = cli("publish", str(tmp_path / "k.ss"), "k", *given)
    assert result.returncode == 2 and "--allow-empty" in result.stderr


@pytest.mark.slow
def test_an_empty_payload_is_published_with_allow_empty(tmp_path: Path) -> None:
    path = tmp_path / "k.ss"
    result = cli("publish", str(path), "k", "--allow-empty", stdin="")
    assert result.returncode == 0, result.stderr
    assert [m[2] for m in _messages(path)] == [b""]


def test_at_a_terminal_publish_says_it_reads_the_payload_from_stdin(tmp_path: Path) -> None:
    path = tmp_path / "k.ss"
    controller, terminal = pty.openpty()
    with subprocess.Popen(
        [*COMMAND, "publish", str(path), "k"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        os.close(terminal)
        assert process.stderr is not None
        said, _, _ = select.select([process.stderr], [], [], 30)  # before the read, or never
        if not said:
            process.kill()
        assert said, "nothing on stderr while publish waits for the payload at a terminal"
        line = process.stderr.readline()
        assert line == b"reading the payload from stdin (Ctrl-D to end)\n"
        os.write(controller, b"typed\n\x04")
        out, rest = process.communicate(timeout=30)
    os.close(controller)
    assert process.returncode == 0, rest
    assert out.startswith(b"k seq:")
    assert [m[2] for m in _messages(path)] == [b"typed\n"]
