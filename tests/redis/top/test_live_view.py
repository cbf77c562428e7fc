"""The live view of ``trio-streams top`` in a real terminal: tmux runs it, keys are typed with
``send-keys``, and the screen is read with ``capture-pane``."""

from __future__ import annotations

import sys

import trio

from tests.cli.support import ROOT
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .scenario import setup
from .terminal import screen_shows, session, tmux

__all__ = ["session"]  # the fixture


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


def test_at_80_columns_names_keep_their_width_and_empty_columns_are_left_out() -> None:
    from rich.console import Console

    from trio_streams.top.live import _renderable, _State
    from trio_streams.top.view import Screen

    header = ["STREAM", "LENGTH", "ADDED/S", "PENDING", "LAG", "DELIVERED/S", "ACKED/S"]
    rows = [
        ["orders.eu-west.payments", "10", "-", "", "", "", ""],
        ["orders.eu-west.refunds", "20", "-", "", "", "", ""],
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(_renderable(Screen("title", [("streams", (header, rows))]), _State()))
    text = console.export_text()
    assert "orders.eu-west.payments" in text and "orders.eu-west.refunds" in text
    assert "LENGTH" in text and "PENDING" not in text  # nothing to show: left out
