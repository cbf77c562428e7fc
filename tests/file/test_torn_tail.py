"""A stream file whose last frame is cut short: every complete message before the cut is
handled and settled first; then a replay fails with the typed error naming the file and the
byte offset, and a live subscription waits for the next writer to replace the cut frame."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.support import serving
from trio_streams import AppFailed
from trio_streams.file import FilePosition, FileStream, TruncatedError
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .apps import file_app, write_numbers


def _torn(path: Path, count: int, *, key: str = "s", into_last: int = 5) -> int:
    """Write ``count`` messages to ``path`` and cut the file ``into_last`` bytes into the last
    one (as a crashed writer leaves it); the offset of the cut frame."""
    write_numbers(path, count, key=key)
    with FileReader(path) as reader:
        last = list(reader)[-1].offset
    os.truncate(path, last + into_last)
    return last


async def _replay_until_failed(path: Path, handled: list[int], **options: Any) -> AppFailed:
    app, broker = file_app(path, existing_only=True)

    @broker.subscriber(FileStream("s").replay(), name="sub", **options)
    async def handle(n: int) -> None:
        await trio.lowlevel.checkpoint()
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with serving(app) as running:
            await running.wait_stopped()
    [error] = failed.value.exceptions
    assert isinstance(error, AppFailed)
    return error


async def test_a_replay_over_a_cut_last_frame_handles_every_complete_message_then_fails(
    tmp_path: Path,
) -> None:
    path = tmp_path / "torn.ss"
    cut = _torn(path, 3)
    handled: list[int] = []
    error = await _replay_until_failed(path, handled)
    assert handled == [1, 2]
    cause = error.__cause__
    assert isinstance(cause, TruncatedError)
    assert cause.path == str(path)
    assert cause.offset == cut


async def test_deliveries_still_queued_when_the_read_fails_are_handled_not_abandoned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One read takes all 40 complete messages; the next read fails at once, while one worker
    # is still on the first of them.
    path = tmp_path / "torn.ss"
    _torn(path, 41)
    handled: list[int] = []
    await _replay_until_failed(path, handled, workers=1, buffer=64, count=64)
    assert handled == list(range(1, 41))
    assert "abandoned" not in caplog.text


def test_the_cli_run_of_a_replay_over_a_cut_frame_handles_the_messages_then_exits_1_in_one_line(
    tmp_path: Path,
) -> None:
    source = tmp_path / "orders.ss"
    last = _torn(source, 3, key="orders")
    (tmp_path / "torn_app.py").write_text(
        textwrap.dedent(
            f"""
            from trio_streams import App
            from trio_streams.file import FileBroker, FileStream

            app = App("torn")
            log = app.broker(FileBroker({str(source)!r}, existing_only=True))

            @log.subscriber(FileStream("orders").replay(), name="h")
            async def h(n: int) -> None:
                print("handled", n, flush=True)
            """
        )
    )
    result = cli("run", "torn_app:app", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == ["handled 1", "handled 2"]
    assert "abandoned" not in result.stderr
    assert "Traceback" not in result.stderr
    [last_line] = [line for line in stderr_lines(result) if line.startswith("trio-streams run")]
    assert "TruncatedError" in last_line
    assert f"{source} at byte {last}" in last_line


async def test_a_live_subscription_at_a_cut_frame_waits_and_reads_what_the_next_writer_writes(
    tmp_path: Path,
) -> None:
    # A cut frame at the tip looks the same as an append under way: a live reader waits. The
    # next writer to open the file truncates the cut tail away and appends in its place.
    path = tmp_path / "torn.ss"
    _torn(path, 3)
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []
    two, four = trio.Event(), trio.Event()

    @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()), name="live")
    async def handle(n: int) -> None:
        handled.append(n)
        if n == 2:
            two.set()
        if n == 4:
            four.set()

    code = textwrap.dedent(
        f"""
        from trio_streams.file.writer import StreamWriter
        with StreamWriter({str(path)!r}) as writer:
            writer.append("s", b"4")
        """
    )
    with trio.fail_after(20):
        async with serving(app):
            await two.wait()
            await trio.run_process([sys.executable, "-c", code])
            await four.wait()
    assert handled == [1, 2, 4]
    with StreamWriter(path) as writer:  # the file is whole again
        assert writer.append("s", b"5")[0] == 4
