"""Process faults: an app in a subprocess, killed with a signal at a chosen point.

A crash lands wherever the process is; a test that kills its app with a timer hits a different
place each run and proves little. :class:`AppProcess` runs the app (``trio-streams run
module:app``, a script, or a module run as ``python -m``) in a subprocess whose kill point is
armed from inside (:mod:`._child`), so the signal comes at exactly the chosen place:

- :meth:`KillPoint.after_deliveries` — once the N-th delivery's handling has ended;
- :meth:`KillPoint.inside_handler` — in the N-th handler run, while it is under way;
- :meth:`KillPoint.between_settle_and_flush` — the N-th acknowledgement is in a Redis pipeline
  window (a group's or a reliable list's) and has not been sent;
- :meth:`KillPoint.during_append` — a stream-file writer holds the file's lock and has written
  part of its frames.

The parent hears that the point was reached on a pipe of its own, apart from the output, which
is captured whole (``p.stdout``, ``p.stderr``). ``await p.killed()`` returns once the process
died of the signal, and raises :class:`KillPointNotReached` (a ``TimeoutError`` naming the
point) if it never came, or :class:`KillPointMissed` if the process ended first.
"""

from __future__ import annotations

import math
import os
import signal as signals
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self, final

import trio

from ...core.errors import TrioStreamsError
from ...core.groups import raise_lone_errors

__all__ = [
    "AppProcess",
    "AppProcessError",
    "KillPoint",
    "KillPointMissed",
    "KillPointNotReached",
    "UnexpectedExit",
]

#: Seconds the waits of :class:`AppProcess` give by default (a loaded 2-core machine starts a
#: Python process with the app's imports in about a second).
DEFAULT_TIMEOUT = 30.0
#: Seconds the output readers get to reach the end of the output once the process is gone (a
#: process of its own that inherited the output may hold it open).
_DRAIN_TIMEOUT = 5.0
#: The tail of stderr an error quotes.
_TAIL = 2000


class AppProcessError(TrioStreamsError):
    """An :class:`AppProcess` did not do what the test expected of it; the message names the
    process, the kill point and the end of its stderr."""


class KillPointNotReached(AppProcessError, TimeoutError):
    """The kill point did not come within the time given (the process still runs)."""


class KillPointMissed(AppProcessError):
    """The process ended before it reached its kill point."""


class UnexpectedExit(AppProcessError):
    """The process ended otherwise than expected: not of the signal it was sent, or not within
    the time given."""


def _check_target(target: object) -> str:
    """``target`` as a string (a path is taken as a script's or module's path), else a
    ``TypeError``/``ValueError`` naming it."""
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise TypeError(
            f"AppProcess: target is 'module:app', a script's path or a module's name, "
            f"not {target!r}"
        )
    if not target.strip() or target.startswith((":", "-")) or target.endswith(":"):
        raise ValueError(
            f"AppProcess: target is 'module:app', a script's path or a module's name, "
            f"not {target!r}"
        )
    return target


def _runs_elsewhere(arg: str) -> bool:
    """Whether ``arg`` is ``--workers`` or ``--reload`` (or ``--workers=N``, or a prefix the
    command line takes for one), which run the app in processes of their own."""
    name = arg.split("=", 1)[0]
    return len(name) > 2 and any(option.startswith(name) for option in ("--workers", "--reload"))


class _Captured:
    """One output stream of the process: every byte, and its complete lines decoded as they
    come (so a wait that reads them again and again does not decode it all each time)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.lines: list[str] = []
        self._partial = b""

    def add(self, chunk: bytes | bytearray) -> None:
        self.data += chunk
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        self.lines.extend(line.decode(errors="replace") for line in complete)


@final
@dataclass(frozen=True, slots=True)
class KillPoint:
    """Where in the child the signal comes; build one with the class methods."""

    kind: str
    n: int = 1

    def __post_init__(self) -> None:
        if self.kind not in (
            "after_deliveries",
            "inside_handler",
            "between_settle_and_flush",
            "during_append",
        ):
            raise ValueError(f"unknown kill point {self.kind!r}")
        if type(self.n) is not int or self.n < 1:
            raise ValueError(
                f"kill point {self.kind}: n must be a whole number >= 1, not {self.n!r}"
            )

    @classmethod
    def after_deliveries(cls, n: int) -> KillPoint:
        """Once the handling of the ``n``-th delivery has ended (its outcome settled, as far as
        its transport settles at once; deliveries of every subscription count, in the order
        their handling ends). Other deliveries may be in handlers then, as workers allow."""
        return cls("after_deliveries", n)

    @classmethod
    def inside_handler(cls, n: int) -> KillPoint:
        """In the ``n``-th handler run (of any handler of the app; a batch is one run), at its
        first checkpoint: the run has begun (a transport that counts runs has counted it) and
        its outcome is not decided. A handler that returns without a checkpoint is killed after
        it returned, before its outcome is settled."""
        return cls("inside_handler", n)

    @classmethod
    def between_settle_and_flush(cls, n: int = 1) -> KillPoint:
        """When the ``n``-th ack or drop has entered a Redis pipeline window (a consumer group
        or a reliable list; every such subscription settles through one) and before the flush
        that would send it."""
        return cls("between_settle_and_flush", n)

    @classmethod
    def during_append(cls, n: int = 1) -> KillPoint:
        """In the ``n``-th write of a stream-file writer of the process (a publish, a flush),
        holding the file's lock, with half of the write's bytes in the file. Only writes of
        frames count: a new file's header is not one."""
        return cls("during_append", n)

    def __str__(self) -> str:
        return f"{self.kind}({self.n})"


class AppProcess:
    """An app in a subprocess, killed at a chosen point: ``async with AppProcess(...) as p``.

    ``target`` is what to run: ``module:attribute`` runs ``trio-streams run TARGET ARGS``; a
    path ending in ``.py`` runs that script; any other name runs that module as ``python -m``.
    ``kill_at`` arms a :class:`KillPoint`; ``signal`` is what it sends (SIGKILL: a crash;
    SIGTERM: the app's graceful stop). With ``hold``, the process stands still at the point
    (every thread of it) until :meth:`killed` (or :meth:`release`): meanwhile the test looks at
    what it left. ``env`` is added to this process's environment; ``cwd`` defaults to the
    current directory (the target is imported from there). ``timeout`` bounds each wait of
    the methods below (:attr:`timeout`).

    The block owns the process: the output readers are tasks of a nursery it opens, and leaving
    the block kills a process still running (SIGKILL) and waits for it, also when the block is
    cancelled or raised.
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        *args: str | os.PathLike[str] | int | float,
        kill_at: KillPoint | None = None,
        signal: int = signals.SIGKILL,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        hold: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        target = _check_target(target)
        if kill_at is not None and not isinstance(kill_at, KillPoint):
            raise TypeError(
                f"AppProcess: kill_at is a KillPoint (KillPoint.inside_handler(1), ...) or None, "
                f"not {kill_at!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"AppProcess: timeout is a number of seconds, not {timeout!r}")
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"AppProcess: timeout must be finite and > 0 seconds, not {timeout!r}")
        if hold and kill_at is None:
            raise ValueError(
                "AppProcess: hold=True holds the process at its kill_at point: give one"
            )
        self.target = target
        self.args = [str(arg) for arg in args]
        self.kill_at = kill_at
        self.signal = signals.Signals(signal)
        self.env = dict(env or {})
        self.cwd = Path.cwd() if cwd is None else Path(cwd)
        self.hold = hold
        #: Seconds each wait of this process's methods is bounded by (change it at will):
        #: past it, the wait raises an error naming what did not come.
        self.timeout = timeout
        if ":" in target:
            self._how = "run"
            if kill_at is not None and any(map(_runs_elsewhere, self.args)):
                raise ValueError(
                    "AppProcess: --workers and --reload run the app in processes of their own, "
                    "where no kill point is armed: leave them out"
                )
        elif target.endswith(".py"):
            self._how = "script"
        else:
            self._how = "module"
        #: The process's exit status once it ended (negative: the signal that ended it).
        self.returncode: int | None = None
        self._stdout = _Captured()
        self._stderr = _Captured()
        self._reports: list[str] = []
        self._changed = trio.Event()
        self._process: trio.Process | None = None
        self._hold_fd: int | None = None
        self._stack: AsyncExitStack | None = None
        self._closed_streams = 0

    def __repr__(self) -> str:
        pid = "" if self._process is None else f" pid {self._process.pid}"
        return f"<AppProcess {self.describe()}{pid}>"

    def describe(self) -> str:
        """What runs, as a command line a reader recognises."""
        command = {
            "run": f"trio-streams run {self.target}",
            "script": f"python {self.target}",
            "module": f"python -m {self.target}",
        }[self._how]
        return " ".join([command, *self.args])

    # ---- the block ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        stack = AsyncExitStack()
        async with stack:
            await stack.enter_async_context(self._running())
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._stack is not None
        stack, self._stack = self._stack, None
        return await stack.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        if self._process is not None:
            raise RuntimeError(f"{self!r} was started already: make a new AppProcess")
        report_read, report_write = os.pipe()
        hold_read: int | None = None
        passed = [report_write]
        argv = [
            sys.executable,
            "-m",
            "trio_streams.testing.faults._child",
            "--report-fd",
            str(report_write),
        ]
        if self.hold:
            hold_read, self._hold_fd = os.pipe()
            passed.append(hold_read)
            argv += ["--hold-fd", str(hold_read)]
        if self.kill_at is not None:
            argv += ["--kill-at", f"{self.kill_at.kind}:{self.kill_at.n}"]
            argv += ["--signal", str(int(self.signal))]
        argv += [self._how, self.target, *self.args]
        try:
            self._process = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=passed,
                cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )
        except BaseException:
            os.close(report_read)
            self._close_hold()
            raise
        finally:
            for fd in passed:
                os.close(fd)  # the child's now
        process = self._process
        assert process.stdout is not None and process.stderr is not None
        reports = trio.lowlevel.FdStream(report_read)
        try:
            with raise_lone_errors():  # the block's error leaves as itself, not in a group
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, process.stdout, self._stdout)
                    nursery.start_soon(self._pump, process.stderr, self._stderr)
                    nursery.start_soon(self._pump_reports, reports)
                    nursery.start_soon(self._reap, process)
                    try:
                        yield
                    finally:
                        with trio.CancelScope(shield=True):
                            await self._end(process)
                        nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await reports.aclose()
                await process.stdout.aclose()
                await process.stderr.aclose()
            self._close_hold()

    async def _end(self, process: trio.Process) -> None:
        """Leaving the block: the process is killed if it still runs, then waited for; the
        readers get a moment to reach the end of the output."""
        self._close_hold()  # a held process goes on to its signal
        if process.returncode is None:
            process.kill()
        await process.wait()
        self.returncode = process.returncode
        with trio.move_on_after(_DRAIN_TIMEOUT):
            while self._closed_streams < 3:
                await self._wait_change()

    def _close_hold(self) -> None:
        if self._hold_fd is not None:
            os.close(self._hold_fd)
            self._hold_fd = None

    async def _pump(self, stream: trio.abc.ReceiveStream, sink: _Captured) -> None:
        while chunk := await stream.receive_some(65536):
            sink.add(chunk)
            self._notify()
        self._closed_streams += 1
        self._notify()

    async def _pump_reports(self, stream: trio.lowlevel.FdStream) -> None:
        pending = b""
        while chunk := await stream.receive_some(4096):
            *lines, pending = (pending + chunk).split(b"\n")
            self._reports.extend(line.decode() for line in lines)
            self._notify()
        self._closed_streams += 1
        self._notify()

    async def _reap(self, process: trio.Process) -> None:
        await process.wait()
        self.returncode = process.returncode
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    async def _until(self, done: Callable[[], bool]) -> bool:
        """Wait until ``done()`` holds (checked at each change: output, a report, the exit);
        False if :attr:`timeout` passed first."""
        with trio.move_on_after(self.timeout):
            while not done():
                await self._wait_change()
            return True
        return False

    # ---- what the test asks ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._started_process().pid

    @property
    def stdout(self) -> bytes:
        """All the process wrote to its stdout so far."""
        return bytes(self._stdout.data)

    @property
    def stderr(self) -> bytes:
        """All the process wrote to its stderr so far."""
        return bytes(self._stderr.data)

    def lines(self) -> list[str]:
        """The complete lines of stdout so far, decoded."""
        return list(self._stdout.lines)

    @property
    def reached_point(self) -> bool:
        """Whether the kill point was reached."""
        return any(line.startswith("reached ") for line in self._reports)

    async def started(self) -> None:
        """Wait until the app reports it is running (its ``after_startup`` hooks have run).
        Raises :class:`KillPointMissed` (the point not reached) or :class:`UnexpectedExit` if
        the process ended first, :class:`UnexpectedExit` after :attr:`timeout`. A script or module
        that serves no app never reports it."""
        if await self._until(lambda: "started" in self._reports or self._exited()):
            if "started" in self._reports:
                return
            raise self._ended_before("starting")
        raise UnexpectedExit(
            f"{self.describe()} did not report started within {self.timeout:g} s"
            f"{self._stderr_tail()}"
        )

    async def wait_for_output(self, text: str, *, stream: str = "stdout") -> str:
        """The first complete line of ``stream`` (``stdout`` or ``stderr``) holding ``text``;
        raises :class:`UnexpectedExit` if the process ended, or :attr:`timeout` passed, first."""
        lines = {"stdout": self._stdout, "stderr": self._stderr}[stream].lines
        scanned = 0

        def found() -> str | None:
            nonlocal scanned
            for line in lines[scanned:]:
                if text in line:
                    return line
                scanned += 1
            return None

        if await self._until(lambda: found() is not None or self._exited()):
            line = found()
            if line is not None:
                return line
            raise UnexpectedExit(
                f"{self.describe()} exited with status {self.returncode} before its {stream} "
                f"held {text!r}{self._stderr_tail()}"
            )
        raise UnexpectedExit(
            f"{self.describe()}: no line of its {stream} held {text!r} within {self.timeout:g} s"
            f"{self._stderr_tail()}"
        )

    async def wait_until(self, check: Callable[[], bool], *, what: str) -> None:
        """Wait until ``check()`` holds, checked at each change (output, a report, the exit):
        the way to wait for what the output says, without polling. Raises
        :class:`UnexpectedExit` naming ``what`` if the process ended, or :attr:`timeout` passed,
        with ``check()`` still false."""
        if await self._until(lambda: check() or self._exited()):
            if check():
                return
            raise UnexpectedExit(
                f"{self.describe()} {self._how_ended()} before {what}{self._stderr_tail()}"
            )
        raise UnexpectedExit(
            f"{self.describe()}: no sign of {what} within {self.timeout:g} s{self._stderr_tail()}"
        )

    async def reached(self) -> None:
        """Wait until the kill point is reached. Raises :class:`KillPointNotReached` after
        :attr:`timeout` and :class:`KillPointMissed` if the process ended first."""
        point = self._point()
        if not await self._until(lambda: self.reached_point or self._exited()):
            raise KillPointNotReached(
                f"kill point {point} not reached within {self.timeout:g} s by {self.describe()} "
                f"(still running){self._stderr_tail()}"
            )
        if not self.reached_point:
            raise self._ended_before(f"reaching kill point {point}")

    def release(self) -> None:
        """Let a process held at its point go on to its signal."""
        self._close_hold()

    async def killed(self) -> int:
        """Wait until the kill point is reached and the process has ended of it; its exit
        status. Without a kill point, the signal is sent now.

        Under SIGKILL the status must be ``-SIGKILL`` (else :class:`UnexpectedExit`); under a
        signal the app may catch (SIGTERM, SIGINT: a graceful stop) whatever status it exited
        with is returned. :class:`KillPointNotReached` and :class:`KillPointMissed` as in
        :meth:`reached`; :class:`UnexpectedExit` if the process outlives :attr:`timeout`."""
        if self.kill_at is None:
            self.send_signal(self.signal)
        else:
            await self.reached()
            self.release()
        status = await self.wait()
        if self.signal == signals.SIGKILL and status != -signals.SIGKILL:
            raise UnexpectedExit(
                f"{self.describe()} exited with status {status}, not of SIGKILL"
                f"{self._where()}{self._stderr_tail()}"
            )
        return status

    async def stop(self) -> int:
        """A graceful stop: SIGTERM, then wait for the exit; its status. Raises
        :class:`UnexpectedExit` if the process outlives :attr:`timeout` (leaving the block kills
        it)."""
        self.release()
        self.send_signal(signals.SIGTERM)
        return await self.wait()

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` now, if the process still runs."""
        process = self._started_process()
        if process.returncode is None:
            process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL now, wherever the process is."""
        self.send_signal(signals.SIGKILL)

    async def wait(self) -> int:
        """Wait for the process to end; its exit status (negative: the signal that ended it).
        Raises :class:`UnexpectedExit` after :attr:`timeout`."""
        if not await self._until(self._exited):
            raise UnexpectedExit(
                f"{self.describe()} still runs after {self.timeout:g} s{self._where()}"
                f"{self._stderr_tail()}"
            )
        assert self.returncode is not None
        return self.returncode

    # ---- helpers -----------------------------------------------------------------------------

    def _started_process(self) -> trio.Process:
        if self._process is None:
            raise RuntimeError(f"{self!r} is not started: use it as `async with AppProcess(...)`")
        return self._process

    def _exited(self) -> bool:
        return self.returncode is not None

    def _point(self) -> KillPoint:
        if self.kill_at is None:
            raise RuntimeError(f"{self!r} has no kill point: give kill_at=KillPoint...")
        return self.kill_at

    def _where(self) -> str:
        if self.kill_at is None:
            return ""
        state = "reached" if self.reached_point else "not reached"
        return f" (kill point {self.kill_at} {state})"

    def _how_ended(self) -> str:
        status = self.returncode
        if status is not None and status < 0:
            return f"was killed by {signals.Signals(-status).name}"
        return f"exited with status {status}"

    def _ended_before(self, what: str) -> AppProcessError:
        error = KillPointMissed if self.kill_at is not None else UnexpectedExit
        return error(f"{self.describe()} {self._how_ended()} before {what}{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        tail = self._stderr.data[-_TAIL:].decode(errors="replace").strip()
        return f"; its stderr ends:\n{tail}" if tail else "; its stderr is empty"
