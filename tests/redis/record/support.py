"""Helpers for recording tests: scripted streams with known ids, and reading a recording."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from tests.cli.support import ROOT
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader
from trio_streams.redis.client import RedisClient


async def add_entries(redis: RedisClient, key: str, count: int, *, first_ms: int = 1000) -> None:
    """``count`` entries with ids ``<first_ms + 1000 n>-0``, a JSON payload and two headers."""
    pipeline = redis.pipeline()
    for n in range(count):
        pipeline.add(
            "XADD", key, f"{first_ms + 1000 * n}-0",
            "_payload", b'{"n":%d}' % n, "h:trace", f"t{n}", "h:tenant", "eu",
        )  # fmt: skip
    (await pipeline.execute()).raise_first()


async def raw_entries(redis: RedisClient, key: str) -> list[tuple[str, list[bytes]]]:
    """Every entry of ``key`` as (id, flat field list)."""
    return [(i.decode(), list(f)) for i, f in await redis.execute("XRANGE", key, "-", "+")]


def recorded(path: Path) -> list[tuple[str, int, int, bytes, dict[str, str]]]:
    """Every message of a recording: (key, seq, timestamp, payload, headers)."""
    out = []
    with FileReader(path) as reader:
        for message in reader:
            payload, headers = open_envelope(message.payload)
            out.append(
                (message.stream_key, message.seq, message.timestamp_ms, payload, dict(headers))
            )
    return out


def group_state(groups: Any, pending: Any, consumers: Any) -> Any:
    """What a group is, without idle times (which tick whatever anybody does)."""
    from trio_streams.redis.client import shapes

    info = [{k: v for k, v in g.items() if k != "inactive"} for g in shapes.group_info(groups)]
    rows = [(row[0], row[1], row[3]) for row in pending]
    people = [(c["name"], c["pending"]) for c in shapes.consumer_info(consumers)]
    return info, rows, people


def checkout_env() -> dict[str, str]:
    """The environment for a command run from another directory than the checkout's: it still
    imports this checkout's ``trio_streams``."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@asynccontextmanager
async def command_in_background(argv: list[str], cwd: Path) -> AsyncIterator[trio.Process]:
    """``argv`` running from ``cwd`` (see :func:`checkout_env`), its output in the files
    ``cwd/out`` and ``cwd/err``; killed on the way out if it still runs."""
    with (cwd / "out").open("w") as out_file, (cwd / "err").open("w") as err_file:
        process = await trio.lowlevel.open_process(
            argv, cwd=cwd, stdout=out_file, stderr=err_file, env=checkout_env()
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def exit_status(process: trio.Process, signum: int | None = None) -> int:
    """Send ``signum`` (None: none) and wait, at most 30 s, for ``process`` to exit."""
    if signum is not None:
        process.send_signal(signum)
    with trio.fail_after(30):
        return await process.wait()
