"""The child side of :class:`~trio_streams.testing.faults.processes.AppProcess`.

``python -m trio_streams.testing.faults._child --report-fd FD [--hold-fd FD] [--kill-at
KIND:N] [--signal SIGNUM] (run TARGET | script PATH | module NAME) [ARGS...]`` arms a kill
point in this process, then runs ``trio-streams run TARGET ARGS`` (or the script, or the
module as ``__main__``) as it would run on its own.

The point is armed from inside, so it is hit exactly, never by a timer:

- ``after_deliveries:N`` — a middleware, put outermost on every app this process serves, counts
  the deliveries whose handling ended (their settle done, as far as the transport settles at
  once); the N-th ending fires it.
- ``inside_handler:N`` — every handler of the app is wrapped: the N-th run (the run already
  counted by a transport that counts runs) goes on until its first checkpoint, where it fires
  (a handler that returns without one fires after it returned, before its outcome is settled).
- ``between_settle_and_flush:N`` — the N-th acknowledgement (ack or drop) that enters a Redis
  pipeline window (a group's or a reliable list's: ``Window.consumed``) fires it, once it is in
  the window and before any flush could send it.
- ``during_append:N`` — the N-th write of frames by a stream-file writer
  (``StreamWriter._write_at``, where the writer holds the file's lock; a new file's header, at
  offset 0, is not counted): half of the bytes are written, then it fires.

Firing writes ``reached KIND N`` to the report descriptor, waits for a byte on the hold
descriptor if there is one (the whole process stands still meanwhile: the parent looks at what it
left), then sends this process the signal (SIGKILL by default: it dies there; SIGTERM starts a
graceful stop and the process goes on). Every app served also reports ``started`` once it is
running (an ``after_startup`` hook).

What this wraps lies outside the public API: :data:`INTERNALS` names it, and
:func:`check_internals` (run by the kit's tests, not here: the child imports only what its
point needs) fails, naming the one that is gone, when one was renamed.
"""

from __future__ import annotations

import functools
import os
import runpy
import signal
import sys
import types
from collections.abc import AsyncIterator, Callable, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

#: The internals the kill points wrap: (module, attribute path, what it is for).
INTERNALS: tuple[tuple[str, str, str], ...] = (
    ("trio_streams.core.app", "App.serve_with", "where every run of an app begins"),
    ("trio_streams.core.app", "App.middlewares", "the app's middlewares (after_deliveries)"),
    ("trio_streams.core.routing", "Subscription.handler", "a mounted handler (inside_handler)"),
    ("trio_streams.core.handler", "Handler.fn", "the handler's function (inside_handler)"),
    (
        "trio_streams.redis.window",
        "Window.consumed",
        "where a settle enters a pipeline window (between_settle_and_flush)",
    ),
    (
        "trio_streams.file.writer",
        "StreamWriter._write_at",
        "the write made under the file's lock (during_append)",
    ),
)

KINDS = ("after_deliveries", "inside_handler", "between_settle_and_flush", "during_append")


class InternalMissing(RuntimeError):
    """An internal a kill point wraps is gone (renamed or removed): the kit needs updating."""


def check_internals() -> None:
    """Raise :class:`InternalMissing` naming each internal of :data:`INTERNALS` that is gone."""
    import importlib
    import inspect

    missing = []
    for module_name, path, what in INTERNALS:
        owner_name, _, attribute = path.rpartition(".")
        owner = getattr(importlib.import_module(module_name), owner_name, None)
        if owner is None:
            missing.append(f"{module_name}.{path} ({what})")
            continue
        names = set(dir(owner))
        fields = getattr(owner, "__dataclass_fields__", {})
        # An attribute set in __init__ only shows in its source.
        if (
            attribute not in names
            and attribute not in fields
            and f"self.{attribute} =" not in inspect.getsource(owner)
        ):
            missing.append(f"{module_name}.{path} ({what})")
    if missing:
        raise InternalMissing(
            "the process-fault kit wraps internals that are gone: " + "; ".join(missing)
        )


@dataclass(slots=True)
class _Arm:
    """The armed point: which kind, which occurrence, what then."""

    kind: str
    n: int
    signum: int
    report_fd: int
    hold_fd: int | None
    count: int = 0
    fired: bool = False

    def hit(self, kind: str) -> bool:
        """Count one occurrence of ``kind``; True for the one that fires."""
        if self.fired or kind != self.kind:
            return False
        self.count += 1
        return self.count == self.n

    def fire(self) -> None:
        """Report the point, stand still while held, then signal this process."""
        self.fired = True
        _report(self.report_fd, f"reached {self.kind} {self.n}")
        if self.hold_fd is not None:
            os.read(self.hold_fd, 1)  # blocks every thread of the app: frozen at the point
        os.kill(os.getpid(), self.signum)


def _report(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode() + b"\n")  # one short write: never split
    except OSError:
        pass  # the parent stopped listening: the point still fires


# ---- the wrappers ------------------------------------------------------------------------------


def _arm_apps(arm: _Arm | None, report_fd: int) -> None:
    """Every app this process serves reports ``started``, and gets the point's middleware or
    wrapped handlers."""
    from trio_streams.core.app import App

    serve_with = App.serve_with

    @functools.wraps(serve_with)
    async def armed_serve_with(self: App, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "_kill_point_armed", False):
            object.__setattr__(self, "_kill_point_armed", True)
            if arm is not None and arm.kind == "after_deliveries":
                self.middlewares = (_deliveries_middleware(arm), *self.middlewares)
            if arm is not None and arm.kind == "inside_handler":
                for broker in self.brokers:
                    for subscription in broker.subscriptions:
                        handler = subscription.handler
                        subscription.handler = replace(handler, fn=_armed_handler(handler.fn, arm))

            async def report_started() -> None:
                _report(report_fd, "started")

            self.after_startup(report_started)
        await serve_with(self, *args, **kwargs)

    App.serve_with = armed_serve_with  # type: ignore[method-assign]


def _deliveries_middleware(arm: _Arm) -> Any:
    from trio_streams.core.middleware import HandlerCall, Middleware

    class KillAfterDeliveries(Middleware):
        @asynccontextmanager
        async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
            yield
            if arm.hit("after_deliveries"):
                arm.fire()

    return KillAfterDeliveries()


def _armed_handler(fn: Callable[..., Any], arm: _Arm) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def armed(*args: Any) -> Any:
        if not arm.hit("inside_handler"):
            return await fn(*args)
        coroutine = fn(*args)
        try:
            trap = coroutine.send(None)  # the handler runs to its first checkpoint
        except StopIteration as returned:
            arm.fire()  # it returned without one: before its outcome is settled
            return returned.value
        except BaseException:
            arm.fire()
            raise
        arm.fire()  # under way, at its first checkpoint (SIGKILL: never returns)
        return await _resume(coroutine, trap)

    return armed


@types.coroutine
def _resume(coroutine: Any, trap: Any) -> Generator[Any, Any, Any]:
    """Go on running ``coroutine``, already stepped once to ``trap`` (after a signal that
    lets the process live: a graceful stop lets the handler finish)."""
    while True:
        try:
            sent = yield trap
        except BaseException as exc:  # noqa: BLE001 - passed on: cancellation reaches the handler
            try:
                trap = coroutine.throw(exc)
            except StopIteration as returned:
                return returned.value
        else:
            try:
                trap = coroutine.send(sent)
            except StopIteration as returned:
                return returned.value


def _arm_window(arm: _Arm) -> None:
    from trio_streams.redis.window import Window

    consumed = Window.consumed

    @functools.wraps(consumed)
    def armed_consumed(self: Any, token: Any, *, keep: bool) -> bool:
        due = consumed(self, token, keep=keep)
        if arm.hit("between_settle_and_flush"):
            arm.fire()  # in the window, not yet sent (the flush would follow)
        return due

    Window.consumed = armed_consumed  # type: ignore[method-assign]


def _arm_writer(arm: _Arm) -> None:
    from trio_streams.file.format import HEADER_SIZE
    from trio_streams.file.writer import StreamWriter

    write_at = StreamWriter._write_at

    @functools.wraps(write_at)
    def armed_write_at(self: StreamWriter, data: bytes, offset: int) -> None:
        # A new file's header (at offset 0) is not a write of frames: it is not counted.
        if offset < HEADER_SIZE or not arm.hit("during_append"):
            write_at(self, data, offset)
            return
        part = max(1, len(data) // 2) if len(data) > 1 else 0
        written = 0
        while written < part:  # some of the frame's bytes, under the lock
            written += os.pwrite(self._fd, memoryview(data)[written:part], offset + written)
        arm.fire()
        write_at(self, data[written:], offset + written)  # a signal that lets it live

    StreamWriter._write_at = armed_write_at  # type: ignore[method-assign]


# ---- the command -------------------------------------------------------------------------------


def _parse(argv: list[str]) -> tuple[dict[str, str], str, str, list[str]]:
    options: dict[str, str] = {}
    while argv and argv[0].startswith("--"):
        if len(argv) < 2:
            raise SystemExit(f"{__name__}: {argv[0]} needs a value")
        options[argv[0][2:]] = argv[1]
        argv = argv[2:]
    if len(argv) < 2 or argv[0] not in ("run", "script", "module"):
        raise SystemExit(f"{__name__}: expected run TARGET, script PATH or module NAME")
    return options, argv[0], argv[1], argv[2:]


def main(argv: list[str]) -> None:
    options, how, target, args = _parse(argv)
    report_fd = int(options["report-fd"])
    os.set_inheritable(report_fd, False)  # the app's own subprocesses do not hold it
    hold_fd = int(options["hold-fd"]) if "hold-fd" in options else None
    if hold_fd is not None:
        os.set_inheritable(hold_fd, False)
    arm = None
    if "kill-at" in options:
        kind, _, n = options["kill-at"].partition(":")
        if kind not in KINDS:
            raise SystemExit(f"{__name__}: unknown kill point {kind!r}")
        signum = int(options.get("signal", str(int(signal.SIGKILL))))
        arm = _Arm(kind, int(n), signum, report_fd, hold_fd)
    _arm_apps(arm, report_fd)
    if arm is not None and arm.kind == "between_settle_and_flush":
        _arm_window(arm)
    if arm is not None and arm.kind == "during_append":
        _arm_writer(arm)
    if how == "run":
        from trio_streams.cli.commands import main as cli_main

        sys.argv = ["trio-streams", "run", target, *args]
        raise SystemExit(cli_main(["run", target, *args]))
    if how == "module":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    sys.argv = [target, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(target))
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
