"""Errors surface as themselves: a failed assert under ``app.test()``, a failure of
``app.serve``, and the one-line report of what stopped an app."""

from __future__ import annotations

import inspect
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_streams import App, AppFailed, ConfigurationError, MemoryBroker, MemoryStream
from trio_streams.core.groups import leaves, lone_error, raise_lone_errors
from trio_streams.core.reporting import failure_lines
from trio_streams.core.transport import Transport
from trio_streams.file.errors import ChecksumError, WriterLockedError

pytest_plugins = ["pytester"]
HINT = "see the traceback"


def an_app() -> App:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), name="handle")
    async def handle(n: int) -> None: ...

    return app


# ---- app.test() ----------------------------------------------------------------------------


async def test_a_failed_assert_inside_app_test_is_raised_as_itself_from_the_test_line() -> None:
    app = an_app()
    lines: list[int] = []

    async def a_test() -> None:
        async with app.test() as t:
            await t.publish("s", 1)
            lines.append(inspect.currentframe().f_lineno + 1)  # type: ignore[union-attr]
            assert t.handler("handle").call_count == 2, "the handler was not called twice"

    with pytest.raises(AssertionError, match="the handler was not called twice") as failure:
        await a_test()
    assert failure.type is AssertionError  # not a group
    raised_at = failure.traceback[-1]
    assert (Path(raised_at.path).name, raised_at.lineno + 1) == (Path(__file__).name, lines[0])
    assert failure.value.__context__ is None  # no group shown "during handling" of it


async def test_an_error_keeps_its_own_cause_and_context() -> None:
    app = an_app()

    async def a_test() -> None:
        async with app.test():
            try:
                raise KeyError("inner")
            except KeyError as exc:
                raise ValueError("outer") from exc

    with pytest.raises(ValueError, match="outer") as failure:
        await a_test()
    assert isinstance(failure.value.__cause__, KeyError)
    assert isinstance(failure.value.__context__, KeyError)


async def test_several_errors_of_a_test_stay_a_group() -> None:
    app = an_app()

    async def fail(message: str) -> None:
        raise ValueError(message)

    with pytest.RaisesGroup(ValueError, ValueError, flatten_subgroups=True):
        async with app.test(), trio.open_nursery() as nursery:
            nursery.start_soon(fail, "one")
            nursery.start_soon(fail, "two")


async def test_a_cancellation_through_app_test_is_not_swallowed(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = an_app()
    with trio.move_on_after(5) as scope:
        async with app.test():
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert app.health.value.state.value == "stopped"


async def test_a_keyboard_interrupt_through_app_test_is_not_turned_into_something_else() -> None:
    app = an_app()
    with pytest.RaisesGroup(KeyboardInterrupt):
        async with app.test():
            raise KeyboardInterrupt


def test_a_failed_assert_under_pytest_is_reported_inside_one_group_at_most(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        """
        from trio_streams import App, MemoryBroker, MemoryStream

        app = App("svc")
        broker = app.broker(MemoryBroker())

        @broker.subscriber(MemoryStream("s"), name="handle")
        async def handle(n: int) -> None: ...

        async def test_it() -> None:
            async with app.test() as t:
                await t.publish("s", 1)
                assert t.handler(handle).call_count == 2
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    # pytest-trio wraps a test's error in its own group; nothing of ours adds another. (Newer
    # pytest also names that one group in the summary line: "[single exception in ...]".)
    traceback = output.replace("[single exception in ExceptionGroup]", "")
    assert traceback.count("ExceptionGroup") <= 1
    assert "harness.py" not in output
    assert "assert 1 == 2" in output


# ---- app.serve -----------------------------------------------------------------------------


class Unreachable(MemoryBroker):
    refusing = True

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        if self.refusing:
            raise ConnectionRefusedError("no server at 127.0.0.1:1")
        async with super().connect() as transport:
            yield transport


async def test_a_start_failure_is_raised_by_nursery_start_as_itself() -> None:
    app = App("svc")
    broker = app.broker(Unreachable())

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None: ...

    async with trio.open_nursery() as nursery:
        with pytest.raises(ConnectionRefusedError, match="no server"):
            await nursery.start(app.serve)


async def test_a_source_that_cannot_open_fails_the_start_with_its_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The error comes from inside the subscription's own nurseries: none of them shows.
    app = an_app()
    make_runner = app._make_runner

    async def refuse(host: object) -> None:
        raise OSError("NOGROUP no such consumer group")

    def refusing_runner(*args: Any) -> Any:
        runner = make_runner(*args)
        monkeypatch.setattr(runner.source, "open", refuse)
        return runner

    monkeypatch.setattr(app, "_make_runner", refusing_runner)
    async with trio.open_nursery() as nursery:
        with pytest.raises(OSError, match="NOGROUP"):
            await nursery.start(app.serve)


# ---- shutdown_timeout ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [-3, math.nan, "10", True])
def test_a_shutdown_timeout_that_is_not_seconds_is_refused_when_declared(value: object) -> None:
    with pytest.raises(ConfigurationError, match="shutdown_timeout"):
        App("svc", shutdown_timeout=value)  # type: ignore[arg-type]


async def test_a_negative_shutdown_timeout_is_refused_by_serve_before_it_starts() -> None:
    app = an_app()
    async with trio.open_nursery() as nursery:
        with pytest.raises(ConfigurationError, match="must be >= 0 seconds, got -3"):
            await nursery.start(
                lambda task_status: app.serve(shutdown_timeout=-3, task_status=task_status)
            )
    with pytest.raises(ConfigurationError, match="must be >= 0 seconds"):
        app.run_until_stopped(shutdown_timeout=-3)


def test_a_zero_or_infinite_shutdown_timeout_is_fine() -> None:
    assert App("a", shutdown_timeout=0).shutdown_timeout == 0
    assert App("b", shutdown_timeout=math.inf).shutdown_timeout == math.inf


# ---- groups and reports --------------------------------------------------------------------


def test_a_lone_exception_in_nested_groups_is_found_and_anything_else_is_not() -> None:
    error = ValueError("x")
    assert lone_error(ExceptionGroup("a", [ExceptionGroup("b", [error])])) is error
    assert lone_error(ExceptionGroup("a", [error, KeyError()])) is None
    assert lone_error(BaseExceptionGroup("a", [KeyboardInterrupt()])) is None
    assert lone_error(error) is error
    assert leaves(ExceptionGroup("a", [error, ExceptionGroup("b", [KeyError()])]))[0] is error


async def test_raise_lone_errors_leaves_cancellations_to_their_scope(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.move_on_after(1) as scope, raise_lone_errors():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()
    assert scope.cancelled_caught


def test_one_line_per_error_with_the_hint_or_the_traceback_pointer() -> None:
    locked = WriterLockedError("another writer holds its lock", path="orders.ss")
    assert failure_lines(locked, traceback_hint=HINT) == [
        f"orders.ss: another writer holds its lock; {locked.hint()}"
    ]
    assert failure_lines(RuntimeError("a\nb"), traceback_hint=HINT) == [
        f"RuntimeError: a; b; {HINT}"
    ]
    assert failure_lines(
        ExceptionGroup("x", [KeyError("k"), OSError("o")]), traceback_hint=HINT
    ) == [
        f"KeyError: 'k'; {HINT}",
        f"OSError: o; {HINT}",
    ]


def test_a_hint_is_found_on_the_cause_and_not_repeated_when_a_note_says_it() -> None:
    damaged = ChecksumError(received=1, computed=2, path="orders.ss", offset=171)
    failed = AppFailed("app 'svc' stopped: subscription 'read' failed")
    failed.__cause__ = damaged
    (line,) = failure_lines(failed, traceback_hint=HINT)
    assert line.endswith("; `trio-streams file repair orders.ss` moves the unreadable part aside")
    damaged.add_note(f"orders.ss: nothing was changed; {damaged.hint()}")
    (line,) = failure_lines(damaged, traceback_hint=HINT)
    assert line.count("trio-streams file repair") == 1


def test_an_error_whose_cause_is_several_lists_each_under_it() -> None:
    failed = AppFailed("app 'svc' did not start: 2 errors")
    failed.__cause__ = BaseExceptionGroup(
        "x", [KeyError("k"), trio.Cancelled._create(), OSError("o")]
    )
    assert failure_lines(failed, traceback_hint=HINT) == [
        "app 'svc' did not start: 2 errors:",
        f"  KeyError: 'k'; {HINT}",
        f"  OSError: o; {HINT}",
    ]
