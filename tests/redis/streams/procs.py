"""Consumer processes for the tests: start one, read what it prints, kill it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[3]


class Consumer:
    """An app module (``consumer_app`` unless ``module`` names another) in a subprocess; its
    stdout lines (and stderr's, ``with_stderr``) are collected by a thread."""

    def __init__(
        self,
        *args: object,
        module: str = "tests.redis.streams.consumer_app",
        env: dict[str, str] | None = None,
        with_stderr: bool = False,
        cwd: Path = ROOT,
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *map(str, args)],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if with_stderr else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            with self._changed:
                self.lines.append(raw.decode().strip())
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<exit>")
            self._changed.notify_all()

    def _wait_line(self, text: str, timeout: float, *, anywhere: bool = False) -> str:
        def matches(line: str) -> bool:
            return text in line if anywhere else line.startswith(text)

        with self._changed:
            found = self._changed.wait_for(
                lambda: next((line for line in self.lines if matches(line)), None), timeout
            )
            if not found:
                raise AssertionError(f"no line {text!r} within {timeout}s: {self.lines}")
            return found

    async def wait_line(self, prefix: str, *, within: float = 20.0) -> str:
        """The first line starting with ``prefix`` (waits in a thread, bounded)."""
        return await trio.to_thread.run_sync(self._wait_line, prefix, within)

    async def wait_text(self, text: str, *, within: float = 20.0) -> str:
        """The first line holding ``text`` anywhere (a log line, after its timestamp)."""
        return await trio.to_thread.run_sync(lambda: self._wait_line(text, within, anywhere=True))

    async def wait_exit(self, *, within: float = 20.0) -> int:
        return await trio.to_thread.run_sync(lambda: self.process.wait(within))

    def kill(self) -> None:
        """SIGKILL: the process dies wherever it is (a crash)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._close()

    def _close(self) -> None:
        self._thread.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process, if it still runs."""
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close()
