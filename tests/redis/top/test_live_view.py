"""The live view of ``trio-streams top`` in a real terminal: tmux runs it, keys are typed with
``send-keys``, and the screen is read with ``capture-pane``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import trio

from tests.cli.support import ROOT
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .scenario import setup

TMUX = shutil.which("tmux")


def tmux(*args: str) -> str:
    assert TMUX is not None, "tmux is not installed: apt-get install tmux (noxfile installs it)"
    return subprocess.run(
        [TMUX, *args], capture_output=True, text=True, check=True, timeout=10
    ).stdout


@pytest.fixture
def session() -> Iterator[str]:
    name = f"top-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run([TMUX or "tmux", "kill-session", "-t", name], capture_output=True, check=False)


async def screen_shows(session: str, text: str, *, within: float = 20.0) -> str:
    """The pane's text once it contains ``text`` (bounded wait, re-read as the view redraws)."""
    delay = 0.01
    screen = ""
    with trio.move_on_after(within):
        while True:
            screen = await trio.to_thread.run_sync(tmux, "capture-pane", "-p", "-t", session)
            if text in screen:
                return screen
            await trio.sleep(delay)
            delay = min(delay * 2, 0.2)
    raise AssertionError(f"the screen never showed {text!r}; it shows:\n{screen}")


async def test_the_live_view_redraws_and_answers_sort_filter_pause_and_quit_keys(
    redis_server: RedisServer, redis: RedisClient, session: str
) -> None:
    await setup(redis)
    command = (
        f"cd {ROOT} && {sys.executable} -m trio_streams.cli top {redis_server.url} "
        "--interval 0.2 --stuck-after 0; echo EXITED $?; read line"
    )
    await trio.to_thread.run_sync(
        tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "40", command
    )
    screen = await screen_shows(session, "orders/workers/fast")
    assert "orders.dead" in screen and "sort: name" in screen
    await trio.to_thread.run_sync(tmux, "send-keys", "-t", session, "s")
    await screen_shows(session, "sort: length")
    await trio.to_thread.run_sync(tmux, "send-keys", "-t", session, "/", "dead", "Enter")
    screen = await screen_shows(session, "filter: dead")
    assert "orders/workers" not in screen
    await trio.to_thread.run_sync(tmux, "send-keys", "-t", session, "p")
    await screen_shows(session, "PAUSED")
    await trio.to_thread.run_sync(tmux, "send-keys", "-t", session, "q")
    await screen_shows(session, "EXITED 0")
