"""The live view of ``trio-streams top`` in a real terminal: tmux runs it, keys are typed with
``send-keys``, and the screen is read with ``capture-pane``."""

from __future__ import annotations

import re
import sys

import pytest
import trio

from tests.cli.support import ROOT
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .scenario import setup
from .terminal import screen_shows, session, start_top, tmux

__all__ = ["session"]  # the fixture


async def test_the_live_view_redraws_and_answers_sort_filter_pause_and_quit_keys(
    redis_server: RedisServer, redis: RedisClient, session: str
) -> None:
    await setup(redis)
    await start_top(
        session, redis_server.url, "--interval", "0.2", "--stuck-after", "0", columns=160, rows=40
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


def cells_by_header(screen: str, name: str) -> dict[str, str]:
    """The cells of the stream table's row ``name``, by the header each stands under, in
    every band of the table (a cell overlaps its header: numbers align right, names left)."""
    found: dict[str, str] = {}
    header: list[re.Match[str]] = []
    for line in screen.splitlines():
        words = list(re.finditer(r"\S+", line))
        if words and words[0].group() == "STREAM":
            header = words[1:]
        elif words and words[0].group() == name:
            for cell in words[1:]:
                for title in header:
                    if cell.start() < title.end() and title.start() < cell.end():
                        found[title.group()] = cell.group()
    return found


@pytest.mark.parametrize("columns", [80, 120])
async def test_at_80_and_120_columns_every_column_that_holds_a_value_is_shown_whole(
    redis_server: RedisServer, redis: RedisClient, session: str, columns: int
) -> None:
    await setup(redis)  # a group's lag (0), delayed retries and two of them due
    command = (
        f"cd {ROOT} && {sys.executable} -m trio_streams top {redis_server.url} "
        "--interval 0.2; read line"
    )
    await trio.to_thread.run_sync(
        tmux, "new-session", "-d", "-s", session, "-x", str(columns), "-y", "50", command
    )
    screen = await screen_shows(session, "orders/workers/fast")
    assert "…" not in screen, screen  # no header and no cell cut short
    headers = " ".join(line for line in screen.splitlines() if line.lstrip().startswith("STREAM"))
    for header in ("LENGTH", "PENDING", "LAG", "CONSUMERS", "DELAYED", "DUE", "DEAD-LETTERS-OF"):
        assert header in headers.split(), f"{header} missing at {columns} columns:\n{screen}"
    # Side by side or in bands (rates appear from the second sample on, and widen the table):
    # each value stands under its own header.
    orders = cells_by_header(screen, "orders")
    assert (orders["LENGTH"], orders["DELAYED"], orders["DUE"]) == ("10", "3", "2"), screen
    group = cells_by_header(screen, "orders/workers")
    assert (group["PENDING"], group["LAG"], group["CONSUMERS"]) == ("0", "0", "1"), screen
    assert all(len(line) <= columns for line in screen.splitlines())


def test_the_app_table_at_80_columns_shows_every_column_in_bands_led_by_the_names() -> None:
    from rich.console import Console

    from trio_streams.top.live import _renderable, _State
    from trio_streams.top.view import Screen

    header = [
        "SUBSCRIPTION", "RECEIVED/S", "HANDLED/S", "ACK", "DROP", "RETRY", "RETRY_AFTER",
        "DEAD_LETTER", "RETRIES", "IN-FLIGHT", "QUEUED", "LAG", "FAULTS", "DEGRADED",
    ]  # fmt: skip
    rows = [
        ["bill", "240.0", "240.0", "9312", "0", "41", "0", "2", "41", "3", "0", "7", "0", "no"],
        ["  bill [w0]", "120.0", "120.0", "4656", "0", "20", "0", "1", "20", "1", "0", "7", "0",
         "no"],
    ]  # fmt: skip
    console = Console(width=80, record=True, color_system=None)
    console.print(_renderable(Screen("title", [("subscriptions", (header, rows))]), _State(), 80))
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    words = text.split()
    assert all(name in words for name in header), text
    assert text.count("bill [w0]") == text.count("subscriptions (columns")  # names in each band


def test_a_terminal_narrower_than_a_name_and_a_column_cuts_the_names_not_the_figures() -> None:
    from rich.console import Console

    from trio_streams.top.live import _renderable, _State
    from trio_streams.top.view import Screen

    header = ["STREAM", "LENGTH", "DEAD-LETTERS-OF"]
    rows = [["orders.eu-west.payments.incoming", "10", "orders.eu-west.payments"]]
    console = Console(width=40, record=True, color_system=None)
    console.print(_renderable(Screen("t", [("streams", (header, rows))]), _State(), 40))
    text = console.export_text()
    assert "orders.eu-west.payments" in text.split() and "10" in text.split()  # the figures
    assert "orders.eu-west.payments.incoming" not in text  # the name is cut, with an ellipsis
    # ... in the middle: its start and its end (where names that share a prefix differ) show.
    assert any(
        word.startswith("orde") and "…" in word and word.endswith("incoming")
        for word in text.split()
    ), text
    assert all(len(line) <= 40 for line in text.splitlines())


def test_a_table_without_rows_still_shows_its_header() -> None:
    from rich.console import Console

    from trio_streams.top.live import _renderable, _State
    from trio_streams.top.view import Screen

    console = Console(width=80, record=True, color_system=None)
    console.print(_renderable(Screen("t", [("keys", (["KEY", "MESSAGES"], []))]), _State(), 80))
    assert "KEY" in console.export_text().split()
