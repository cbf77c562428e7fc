"""Running ``trio-streams`` in a real subprocess, and stream files to run it on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from trio_streams.file.writer import StreamWriter

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "trio_streams"]


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``trio-streams ARGS`` from the repository's root; its status and its output."""
    return run_command([*COMMAND, *args], env=env, stdin=stdin)


def run_command(
    argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository's root (within a minute); its status and its output."""
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stream_file(path: Path, messages: int, *, key: str = "orders", payload: bytes = b"1") -> Path:
    """A stream file holding ``messages`` messages of ``key`` (seq 1..n)."""
    writer = StreamWriter(path, created_at_ms=1_700_000_000_000)
    try:
        for n in range(messages):
            writer.append(key, payload, 1_700_000_000_000 + n)
    finally:
        writer.close()
    return path


def one_error_line(result: subprocess.CompletedProcess[str], status: int, prefix: str) -> str:
    """The one line a refused command printed on stderr, after checking its exit ``status``,
    that the line starts with ``prefix`` and that no traceback came with it."""
    assert result.returncode == status, result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    return lines[0]


def stderr_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


class Lines:
    """Reads a process's output line by line, keeping all of it for error messages."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._buffer = b""
        self.seen: list[str] = []

    async def wait_for(self, text: str) -> None:
        while not any(text in line for line in self.seen):
            if b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self.seen.append(line.decode())
                continue
            chunk = await self._stream.receive_some()
            if not chunk:
                raise AssertionError(f"{text!r} never came; output was:\n" + "\n".join(self.seen))
            self._buffer += chunk

    async def rest(self) -> list[str]:
        while chunk := await self._stream.receive_some():
            self._buffer += chunk
        self.seen.extend(self._buffer.decode().splitlines())
        self._buffer = b""
        return self.seen


#: Exit status of a run stopped by a signal before its app was running (docs/guides/cli.md).
STOPPED_STARTING = 130


class Run:
    """A ``trio-streams run`` process and its output (stdout and stderr, in order)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines = Lines(process)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def finish(self, within: float = 20.0) -> tuple[int, list[str]]:
        """The exit status and every line, once the process has exited by itself."""
        with trio.fail_after(within):
            output = await self.lines.rest()
            return await self.process.wait(), output


@asynccontextmanager
async def run_process(
    *args: str,
    stage: str = "",
    in_background: bool = False,
    env: dict[str, str] | None = None,
    module: str | None = None,
) -> AsyncIterator[Run]:
    """``trio-streams run ARGS`` (``python -m MODULE ARGS`` with ``module``); ``in_background``:
    with SIGINT ignored, as a non-interactive shell starts a command with ``&``. Killed on the
    way out if it still runs."""
    argv = [*COMMAND, "run", *args] if module is None else [sys.executable, "-m", module, *args]
    if in_background:
        argv = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
    process = await trio.lowlevel.open_process(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TS_STARTUP_STAGE": stage, **(env or {})},
    )
    try:
        yield Run(process)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        assert process.stdout is not None
        await process.stdout.aclose()


def signal_lines(output: list[str]) -> list[str]:
    return [line for line in output if " received" in line]


def assert_stopped_starting(status: int, output: list[str], *, name: str) -> None:
    """Stopped at once, exit 130, with one line naming the signal and no traceback."""
    text = "\n".join(output)
    assert status == STOPPED_STARTING, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = signal_lines(output)
    assert len(lines) == 1, text
    assert f"{name} received while starting, stopping at once" in lines[0], text
