"""A signal while ``trio-streams run`` connects to a Redis server that does not answer (paused
with SIGSTOP: the connection is accepted, the handshake never answered) and opens its consumer
group there stops it at once, with one line, instead of waiting out the connect timeout. The
same for each worker of ``--workers 2``."""

from __future__ import annotations

import signal

import pytest
import trio

from tests.cli.support import assert_stopped_starting, run_process, signal_lines
from tests.redis_servers import RedisServer

SLOW = "tests.cli.startup_apps:slow"


def slow_url(server: RedisServer) -> dict[str, str]:
    # Far longer than the test waits: only the signal can end the connect.
    return {"TS_TEST_REDIS_URL": f"{server.url}?connect_timeout=120"}


async def test_sigint_while_connecting_to_a_hung_server_stops_at_once(
    redis_server: RedisServer,
) -> None:
    redis_server.pause()
    try:
        async with run_process(SLOW, in_background=True, env=slow_url(redis_server)) as process:
            with trio.fail_after(20):
                await process.lines.wait_for("connecting")
            process.signal(signal.SIGINT)
            status, output = await process.finish()
    finally:
        redis_server.resume()
    assert_stopped_starting(status, output, name="SIGINT")
    assert "slow: SIGINT received while starting" in signal_lines(output)[0]


@pytest.mark.slow
async def test_workers_connecting_to_a_hung_server_stop_on_sigterm(
    redis_server: RedisServer,
) -> None:
    redis_server.pause()
    try:
        async with run_process(SLOW, "--workers", "2", env=slow_url(redis_server)) as process:
            with trio.fail_after(30):
                await process.lines.wait_for("worker 0: connecting")
                await process.lines.wait_for("worker 1: connecting")
            process.signal(signal.SIGTERM)
            status, output = await process.finish(within=30)
    finally:
        redis_server.resume()
    text = "\n".join(output)
    assert status == 0, text
    assert "Traceback" not in text, text
    lines = signal_lines(output)
    assert len(lines) == 3, text
    assert "supervisor: SIGTERM received, draining the workers" in lines[0], text
    assert all("slow: SIGTERM received while starting" in line for line in lines[1:]), text
