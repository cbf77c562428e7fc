"""``trio-streams run --workers N --http``: the endpoint answers for the whole app, with real
worker processes, a real Redis server and real scrapes over HTTP."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from tests.cli.support import cli
from tests.ops.http_client import get
from tests.ops.test_metrics import samples as series
from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import Consumer
from tests.redis.test_run_workers import supervisor, wait_running, worker_pids
from tests.redis_servers import RedisServer, free_port
from trio_streams.redis.client import RedisClient

APP = "tests.cli.worker_apps:metered"
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def received(got: Series, worker: str | None = None) -> float:
    labels = {"subscription": "count"} | ({} if worker is None else {"worker": worker})
    return got.get(("trio_streams_received_total", tuple(sorted(labels.items()))), 0.0)


def counters(got: Series) -> Series:
    return {key: value for key, value in got.items() if key[0].endswith(("_total", "_count"))}


async def publish(redis: RedisClient, count: int, *, first: int = 0) -> None:
    for n in range(first, first + count):
        await redis.execute("XADD", "metered", "*", "_payload", str(n))


@asynccontextmanager
async def app_with_http(
    redis_server: RedisServer, *args: str, workers: int = 3
) -> AsyncIterator[tuple[Consumer, str]]:
    port = free_port()
    running = supervisor(
        redis_server.url, APP, "--workers", str(workers), "--http", f"127.0.0.1:{port}", *args
    )
    try:
        await wait_running(running, "metered", workers)
        yield running, f"http://127.0.0.1:{port}"
        running.signal(signal.SIGTERM)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()


async def scrape(url: str) -> Series:
    status, _, body = await get(url, "/metrics")
    assert status == 200, body
    return series(body)


@pytest.mark.slow
async def test_metrics_serve_every_workers_series_with_a_worker_label_and_exact_app_totals(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    entries = 300
    async with app_with_http(redis_server) as (_, url):
        await publish(redis, entries)
        seen: list[Series] = []

        async def all_counted() -> bool:
            seen.append(await scrape(url))
            return received(seen[-1]) == entries

        await eventually(all_counted, within=60, what=f"{entries} received in the app total")
        for _ in range(10):  # every scrape, whichever worker would have answered before
            seen.append(await scrape(url))
    last = seen[-1]
    assert received(last) == entries
    handled = ("trio_streams_handled_total", (("outcome", "ack"), ("subscription", "count")))
    assert last[handled] == entries
    by_worker = [received(last, str(k)) for k in range(3)]
    assert sum(by_worker) == entries  # the workers' own series add up to the app's
    assert {key[1] for key in last if key[0] == "trio_streams_worker_up"} == {
        (("worker", str(k)),) for k in range(3)
    }
    assert all(last[("trio_streams_worker_up", (("worker", str(k)),))] == 1 for k in range(3))
    assert last[("trio_streams_up", ())] == 1
    for before, after in itertools.pairwise(seen):
        for key, value in counters(before).items():
            assert counters(after).get(key, 0.0) >= value, f"{key} went back: {value} ->"


@pytest.mark.slow
async def test_readyz_is_ready_only_when_every_worker_is_and_healthz_answers_for_them_all(
    redis_server: RedisServer,
) -> None:
    async with app_with_http(redis_server, "--restart-backoff", "10") as (running, url):

        async def answers(path: str, status: int) -> bool:
            return (await get(url, path))[0] == status

        await eventually(lambda: answers("/readyz", 200), within=30, what="/readyz 200")
        status, _, body = await get(url, "/readyz")
        health = json.loads(body)
        assert health["state"] == "running" and health["reason"] is None
        assert sorted(health["workers"]) == ["0", "1", "2"]
        assert (await get(url, "/healthz"))[0] == 200
        os.kill(worker_pids(running)[1], signal.SIGKILL)
        await running.wait_text("worker 1: killed by SIGKILL; restarting in 10.0 s")
        # Restarting after 10 s: the app is neither ready nor healthy meanwhile.
        status, _, body = await get(url, "/readyz")
        assert status == 503
        health = json.loads(body)
        assert health["workers"]["1"]["reason"] == "not answering"
        assert "worker 1: starting (not answering)" in health["reason"]
        assert health["workers"]["0"]["state"] == "running"
        assert (await get(url, "/healthz"))[0] == 503
        await eventually(lambda: answers("/readyz", 200), within=60, what="ready again")
        assert (await get(url, "/healthz"))[0] == 200


@pytest.mark.slow
async def test_a_restarted_workers_counters_never_take_the_app_total_backwards(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    entries, more = 200, 50
    async with app_with_http(redis_server) as (running, url):
        await publish(redis, entries)
        before: Series = {}

        async def counted(total: int) -> bool:
            got = await scrape(url)
            before.clear()
            before.update(got)
            return received(got) == total

        await eventually(lambda: counted(entries), within=60, what="all counted")
        # The worker that counted most (the others may have drained the stream before it).
        slot = max(range(3), key=lambda k: received(before, str(k)))
        victim = worker_pids(running)[slot]
        os.kill(victim, signal.SIGKILL)
        await running.wait_text(f"worker {slot}: killed by SIGKILL; restarting")

        async def restarted() -> bool:
            await trio.lowlevel.checkpoint()
            return worker_pids(running)[slot] != victim

        await eventually(restarted, within=30, what=f"worker {slot} started again")
        await wait_running(running, "metered", 4)
        after = await scrape(url)
        for key, value in counters(before).items():
            assert counters(after).get(key, 0.0) >= value, f"{key}: {value} -> {after.get(key)}"
        assert received(after, str(slot)) == received(before, str(slot)) > 0  # carried over
        assert received(after) == entries
        restarts = ("trio_streams_worker_restarts_total", (("worker", str(slot)),))
        assert after[restarts] == 1
        await publish(redis, more, first=entries)
        await eventually(lambda: counted(entries + more), within=60, what="the new ones counted")
        assert sum(received(before, str(k)) for k in range(3)) == entries + more


@pytest.mark.slow
async def test_workers_print_no_warning_about_the_workers_setting_of_the_http_server(
    redis_server: RedisServer,
) -> None:
    async with app_with_http(redis_server, workers=2) as (running, url):
        assert (await get(url, "/metrics"))[0] == 200
    output = "\n".join(running.lines)
    assert "has no affect" not in output and "Warning" not in output, output


@pytest.mark.slow
async def test_top_shows_the_app_and_a_row_per_worker_from_the_supervisors_endpoint(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    async with app_with_http(redis_server, workers=2) as (_, url):
        await publish(redis, 40)

        async def counted() -> bool:
            return received(await scrape(url)) == 40

        await eventually(counted, within=60, what="40 counted")
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "trio_streams",
                "top",
                url,
                "--once",
                "--interval",
                "0.2",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith(f"{url}: running, 2 workers, 1 subscriptions"), lines[0]
    header = next(line.split() for line in lines if line.startswith("SUBSCRIPTION"))
    rows = {}
    for line in lines:
        cells = line.split()
        if cells and cells[0] == "count":
            label = "count" if len(cells) == len(header) else f"count {cells[1]}"
            values = cells[len(cells) - len(header) + 1 :]
            rows[label] = dict(zip(header, [label, *values], strict=True))
    assert rows["count"]["ACK"] == "40" and rows["count"]["RECEIVED/S"] == "0.0"
    assert int(rows["count [w0]"]["ACK"]) + int(rows["count [w1]"]["ACK"]) == 40
    assert lines.index(next(x for x in lines if x.startswith("count"))) < lines.index(
        next(x for x in lines if "count [w0]" in x)
    )  # the app's line first, its workers' under it


def test_an_http_address_in_use_stops_the_supervisor_before_any_worker_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("run", APP, "--workers", "2", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"trio-streams run: --http 127.0.0.1:{port}: cannot listen there: Address already in use"
    ], result.stderr
    assert "started" not in result.stdout


@pytest.mark.slow
async def test_the_supervisors_endpoint_answers_only_get_and_its_three_paths(
    redis_server: RedisServer,
) -> None:
    async with app_with_http(redis_server, workers=1) as (_, url):
        assert (await get(url, "/nowhere"))[0] == 404
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))
            async with stream:
                await stream.send_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                      b"Content-Length: 0\r\n\r\n")  # fmt: skip
                answer = b""
                while chunk := await stream.receive_some():
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 405")


@pytest.mark.slow
@pytest.mark.parametrize("any_port", [False, True], ids=["given-port", "port-0"])
@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["one-process", "supervisor"])
async def test_one_info_line_says_where_the_http_endpoint_listens_once_it_does(
    redis_server: RedisServer, workers: list[str], any_port: bool
) -> None:
    # Port 0 is any free port: the listening line names the one chosen.
    given = 0 if any_port else free_port()
    running = supervisor(redis_server.url, APP, *workers, "--http", f"127.0.0.1:{given}")
    try:
        shown = "" if any_port else str(given)
        line = await running.wait_text(f"--http: listening on http://127.0.0.1:{shown}", within=30)
        port = int(line.split("http://127.0.0.1:", 1)[1].split(" ", 1)[0])
        assert port != 0 and (any_port or port == given), line
        assert "INFO" in line and "/metrics, /healthz, /readyz" in line, line
        assert (await get(f"http://127.0.0.1:{port}", "/healthz"))[0] in (200, 503)
        await wait_running(running, "metered", 2 if workers else 1)
        running.signal(signal.SIGTERM)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    said = [line for line in running.lines if "--http: listening on" in line]
    assert len(said) == 1, running.lines
