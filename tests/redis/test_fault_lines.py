"""What the log says when a Redis server goes away under a running app: each fault is one
WARNING line naming its kind, the subscription, the server and the innermost cause, with the
traceback at DEBUG only — in the app's log and on the stderr of ``trio-streams run``."""

from __future__ import annotations

import logging
import signal

import pytest
import trio

from tests.cli.support import run_process
from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Position
from trio_streams.core.reporting import innermost
from trio_streams.redis import RedisBroker, RedisStream

_QUICK = "?backoff_initial=0.01&backoff_cap=0.1"
#: The faults a consumer group meets when its server stops: its read, its reclaim pass and
#: its promotion of delayed retries each fail on their own.
_KINDS = ("connection", "reclaim", "delayed")
_APP = "tests.redis.fault_app:app"


def _group_app(url: str) -> App:
    app = App("svc")
    broker = app.broker(RedisBroker(url + _QUICK))
    source = RedisStream("orders", group="g", start=Position.beginning(), min_idle=0.4)

    @broker.subscriber(source, name="orders", block=50)
    async def handle(n: int) -> None: ...

    return app


def _began(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(f"orders: fault {kind!r}:")
    ]


async def _faults_began(caplog: pytest.LogCaptureFixture, server: RedisServer, level: int) -> None:
    """Serve the group app on ``server``, logging at ``level``; stop ``server`` and wait until
    each of :data:`_KINDS` began."""
    caplog.set_level(level, logger="trio_streams")
    async with serving(_group_app(server.url)):
        await trio.to_thread.run_sync(server.stop)

        async def all_began() -> bool:
            await trio.lowlevel.checkpoint()
            return all(_began(caplog, kind) for kind in _KINDS)

        await eventually(all_began, within=20, what=f"the faults {_KINDS} in the log")


async def test_a_fault_is_one_warning_line_naming_kind_subscription_server_and_cause(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    await _faults_began(caplog, redis_server, logging.INFO)
    server = f"127.0.0.1:{redis_server.port}"
    for kind in _KINDS:
        for record in _began(caplog, kind):
            line = record.getMessage()
            assert record.exc_info is None, line
            assert "\n" not in line and "Traceback" not in line, line
            assert server in line, line
            assert line.endswith("(recovering)"), line
    # A connect that was refused says so, as the innermost error of the chain says it.
    refused = [
        r.getMessage()
        for kind in ("reclaim", "delayed")
        for r in _began(caplog, kind)
        if "cannot connect" in r.getMessage()
    ]
    assert refused
    for line in refused:
        assert f"cause: ConnectionRefusedError: [Errno 111] Error connecting to ('127.0.0.1', {redis_server.port}): Connection refused" in line, line  # fmt: skip  # noqa: E501


async def test_the_traceback_of_a_fault_is_logged_at_debug_only(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    await _faults_began(caplog, redis_server, logging.DEBUG)
    with_traceback = [r for r in caplog.records if r.exc_info is not None]
    assert with_traceback
    assert {r.levelno for r in with_traceback} == {logging.DEBUG}
    for kind in _KINDS:
        assert any(f"the traceback of fault {kind!r}" in r.getMessage() for r in with_traceback)


def test_the_innermost_cause_is_found_through_exception_groups() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    group = ExceptionGroup("all attempts failed", [ExceptionGroup("inner", [refused])])
    failed = OSError("all attempts to connect failed")
    failed.__cause__ = group
    outer = RuntimeError("cannot connect")
    outer.__cause__ = failed
    assert innermost(outer) is refused


def test_the_innermost_cause_of_a_chain_that_loops_is_found_without_looping() -> None:
    first, second = ValueError("first"), ValueError("second")
    first.__cause__, second.__cause__ = second, first
    assert innermost(first) in (first, second)


async def _run_until_faults_logged(server: RedisServer, *args: str) -> list[str]:
    """Run the app with ``args``, stop its server until every fault of :data:`_KINDS` began,
    start it again until they cleared, then stop the app: every line it wrote."""
    env = {"TS_TEST_REDIS_URL": server.url}
    async with run_process(_APP, *args, env=env) as process:
        with trio.fail_after(30):
            await process.lines.wait_for("faults: running")
            await trio.to_thread.run_sync(server.stop)
            for kind in _KINDS:
                await process.lines.wait_for(f"orders: fault {kind!r}:")
            await trio.to_thread.run_sync(server.start)
            for kind in _KINDS:
                await process.lines.wait_for(f"orders: fault {kind!r} cleared")
        process.signal(signal.SIGTERM)
        status, output = await process.finish(within=30)
    assert status == 0, "\n".join(output)
    return output


@pytest.mark.slow
async def test_a_run_whose_server_stops_writes_no_traceback_at_the_default_level(
    redis_server: RedisServer,
) -> None:
    output = await _run_until_faults_logged(redis_server)
    text = "\n".join(output)
    assert "Traceback" not in text, text
    assert "cause: ConnectionRefusedError" in text, text


@pytest.mark.slow
async def test_a_run_whose_server_stops_writes_the_tracebacks_with_log_level_debug(
    redis_server: RedisServer,
) -> None:
    output = await _run_until_faults_logged(redis_server, "--log-level", "debug")
    text = "\n".join(output)
    assert "the traceback of fault 'connection'" in text, text
    assert "Traceback (most recent call last)" in text, text
