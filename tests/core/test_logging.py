"""What the app logs: a banner at startup, a retry as one WARNING line (its traceback at DEBUG),
the last attempt as an ERROR with its traceback, a dead letter or drop with its reason."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_streams import (
    App,
    AppFailed,
    MemoryBroker,
    MemoryStream,
    Position,
    TrioStreamsError,
    retry_after,
)
from trio_streams.core.delivery import Delivery
from trio_streams.core.logs import JsonFormatter, LogConfigError, configure
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter
from trio_streams.memory.broker import MemorySubscription, MemoryTransport


def lines_at(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == level and r.name.startswith("trio_streams")]


def flaky_app(fails: int, *, max_attempts: int = 5, **options: Any) -> App:
    app = App("shop")
    broker = app.broker(MemoryBroker())
    calls: list[int] = []

    @broker.subscriber(MemoryStream("orders"), max_attempts=max_attempts, name="charge", **options)
    async def charge(n: int) -> None:
        calls.append(n)
        if len(calls) <= fails:
            raise ValueError(f"gateway timed out (call {len(calls)})")

    return app


async def test_a_handler_failing_twice_then_succeeding_logs_a_bounded_handful_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    app = flaky_app(2)
    async with app.test() as t:
        await t.publish("orders", 1)
    records = [r for r in caplog.records if r.name.startswith("trio_streams")]
    assert len(records) <= 6, [r.getMessage() for r in records]
    assert [r.levelname for r in records].count("WARNING") == 2
    for record in records:
        assert record.exc_info is None, record.getMessage()
        assert "Traceback" not in caplog.text


async def test_a_retry_is_one_warning_line_and_its_traceback_is_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with flaky_app(1).test() as t:
        await t.publish("orders", 1)
    (warning,) = lines_at(caplog, logging.WARNING)
    assert warning.getMessage() == (
        "charge: handler failed on attempt 1 of 5 (message at Position.sequence(1, "
        "stream='orders')): ValueError: gateway timed out (call 1)"
    )
    assert warning.exc_info is None
    (traceback,) = [r for r in lines_at(caplog, logging.DEBUG) if r.exc_info]
    assert traceback.getMessage() == "charge: the traceback of attempt 1"
    assert isinstance(traceback.exc_info[1], ValueError)  # type: ignore[index]


async def test_a_retry_after_says_when_once_it_is_scheduled(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    caplog.set_level(logging.DEBUG)
    async with flaky_app(1, retry_delay=2.5).test() as t:
        await t.publish("orders", 1)
        await t.wait(3)
    (warning,) = lines_at(caplog, logging.WARNING)
    assert "retry" not in warning.getMessage()  # the failure promises nothing
    (scheduled,) = [r for r in lines_at(caplog, logging.DEBUG) if "retry of" in r.getMessage()]
    assert scheduled.getMessage().endswith("held in this process for 2.5s")


async def test_the_last_attempt_is_an_error_with_its_traceback_and_the_dead_letter_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with flaky_app(9, max_attempts=2, dead_letter="orders.dead").test() as t:
        await t.publish("orders", 1)
    (error,) = lines_at(caplog, logging.ERROR)
    assert "charge: handler failed on attempt 2 of 2, the last " in error.getMessage()
    assert isinstance(error.exc_info[1], ValueError)  # type: ignore[index]
    warnings = [r.getMessage() for r in lines_at(caplog, logging.WARNING)]
    assert warnings[-1].endswith(
        "dead-lettered to 'orders.dead' after 2 attempt(s): max-attempts "
        "(ValueError: gateway timed out (call 2))"
    )


async def test_a_drop_after_the_last_attempt_says_why(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with flaky_app(9, max_attempts=1).test() as t:
        await t.publish("orders", 1)
    warnings = [r.getMessage() for r in lines_at(caplog, logging.WARNING)]
    assert warnings[-1].endswith(
        "dropped after 1 attempt(s): max-attempts (ValueError: gateway timed out (call 1))"
    )


async def test_a_batch_handler_failing_is_a_warning_until_the_last_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    app = App("shop")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), batch=2, max_attempts=2, name="charge")
    async def charge(batch: list[int]) -> None:
        raise ValueError("gateway down")

    async with app.test() as t:
        await t.publish("orders", 1)
    (warning,) = lines_at(caplog, logging.WARNING)[:1]
    assert warning.getMessage() == (
        "charge: batch handler failed on 1 messages: ValueError: gateway down"
    )
    assert warning.exc_info is None
    (error,) = lines_at(caplog, logging.ERROR)
    assert error.getMessage().startswith("charge: batch handler failed on 1 messages, the last")
    assert error.exc_info is not None


async def test_the_banner_names_the_app_its_brokers_and_where_each_subscription_starts(
    caplog: pytest.LogCaptureFixture, tmp_path: object
) -> None:
    caplog.set_level(logging.INFO)
    with StreamWriter(f"{tmp_path}/billing.ss") as writer:  # replays need the file and the key
        writer.append("orders", b"1")
    app = App("billing")
    log = app.broker(FileBroker(f"{tmp_path}/billing.ss"))
    memory = app.broker(MemoryBroker(name="events"))

    @log.subscriber(
        FileStream("orders").replay(), workers=4, by_key=str, dead_letter="dead", name="replayed"
    )
    async def replayed(n: int) -> None: ...

    @log.subscriber(FileStream("orders"), name="live")
    async def live(n: int) -> None: ...

    @log.subscriber(FileStream("orders", start_at=Position.sequence(1)), name="from_one")
    async def from_one(n: int) -> None: ...

    @log.subscriber(FileStream("orders", durable="audit").replay(), name="audited")
    async def audited(n: int) -> None: ...

    @memory.subscriber(MemoryStream("clicks"), batch=10, name="clicks")
    async def clicks(batch: list[int]) -> None: ...

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await running.aclose()
    banner = [r.getMessage() for r in lines_at(caplog, logging.INFO)][:6]
    path = f"{tmp_path}/billing.ss"
    assert banner == [
        f"billing: running, 5 subscription(s) on file '{path}', events",
        f"billing: subscription 'replayed' reads FileStream('orders').replay() on file "
        f"'{path}', replaying from the beginning (workers=4, ordered lanes by key, "
        "max_attempts=3, dead letter 'dead')",
        f"billing: subscription 'live' reads FileStream('orders') on file '{path}', following "
        "from the tip (workers=1, max_attempts=3)",
        f"billing: subscription 'from_one' reads FileStream('orders', start_at="
        f"Position.sequence(1)) on file '{path}', from Position.sequence(1), then following "
        "(workers=1, max_attempts=3)",
        f"billing: subscription 'audited' reads FileStream('orders', durable='audit').replay() "
        f"on file '{path}', resuming durable consumer 'audit' where it stopped (the first "
        "time: from the beginning) (workers=1, max_attempts=3)",
        "billing: subscription 'clicks' reads MemoryStream('clicks') on events, following from "
        "the tip (workers=1, batch=10, max_attempts=3)",
    ]


async def test_no_banner_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with flaky_app(0).test() as t:
        await t.publish("orders", 1)
    assert not caplog.records


def record(message: str, *, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("trio_streams.x", logging.ERROR, __file__, 1, message, (), exc_info)


def test_json_format_is_time_level_logger_message_on_one_line() -> None:
    line = JsonFormatter().format(record("héllo\nworld"))
    assert "\n" not in line
    entry = json.loads(line)
    assert set(entry) == {"time", "level", "logger", "message"}
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "ERROR",
        "trio_streams.x",
        "héllo\nworld",
    )
    assert entry["time"].endswith("Z")


def test_json_format_carries_the_traceback_text_when_there_is_one() -> None:
    try:
        raise KeyError("boom")
    except KeyError as exc:
        entry = json.loads(JsonFormatter().format(record("failed", exc=exc)))
    assert entry["exc_info"].startswith("Traceback (most recent call last)")
    assert entry["exc_info"].endswith("KeyError: 'boom'")


def test_configure_refuses_an_unknown_level_or_format() -> None:
    with pytest.raises(LogConfigError, match="log level must be one of debug, info"):
        configure("verbose")
    with pytest.raises(LogConfigError, match="log format must be one of text, json"):
        configure("info", "xml")


def test_app_run_leaves_a_configured_logging_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_streams.core.logs import configure_default

    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    monkeypatch.setattr(root, "handlers", [handler])
    configure_default()
    assert root.handlers == [handler]


async def test_retry_after_outcomes_are_not_failures(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    caplog.set_level(logging.INFO)
    app = App("shop")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(MemoryStream("orders"))
    async def later(n: int) -> object:
        seen.append(n)
        return retry_after(1) if len(seen) == 1 else None

    async with app.test() as t:
        await t.publish("orders", 1)
        await t.wait(2)
    assert seen == [1, 1]
    assert not lines_at(caplog, logging.WARNING)


class _Crashing(MemorySubscription):
    """A source whose read raises the error it was given."""

    error: BaseException = KeyError("bug")

    async def read(self) -> Sequence[Delivery] | None:
        await trio.lowlevel.checkpoint()
        raise self.error


class _CrashingBroker(MemoryBroker):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MemoryTransport]:
        error = self.error

        class Transport(MemoryTransport):
            def open_subscription(
                self, source: Source, options: Mapping[str, Any], *, label: str
            ) -> _Crashing:
                stream = source.in_process()
                assert isinstance(stream, MemoryStream)
                crashing = _Crashing(self.hub, stream, label=label, count=4)
                crashing.error = error
                return crashing

        yield Transport(self.hub)


async def _serve_until_stopped(app: App) -> None:
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await running.wait_stopped()


@pytest.mark.parametrize("typed", [True, False])
async def test_a_running_subscription_that_crashes_logs_its_traceback_unless_the_error_says_why(
    caplog: pytest.LogCaptureFixture, typed: bool
) -> None:
    error = TrioStreamsError("the file is corrupt at byte 7") if typed else KeyError("bug")
    app = App("shop")
    broker = app.broker(_CrashingBroker(error))

    @broker.subscriber(MemoryStream("orders"), name="charge")
    async def charge(n: int) -> None: ...

    caplog.set_level(logging.INFO)
    with pytest.RaisesGroup(AppFailed):
        await _serve_until_stopped(app)
    [line] = [r for r in lines_at(caplog, logging.ERROR) if "'charge' failed" in r.message]
    assert (line.exc_info is None) is typed
