"""What a recording says: its summary line, plain progress lines, and the bar on a terminal."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import trio

from tests.cli.support import ROOT
from tests.redis.top.terminal import screen_shows, session, tmux
from tests.redis_servers import RedisServer
from trio_streams.cli.record import _record_line
from trio_streams.record.progress import PlainProgress, live_rate
from trio_streams.record.recorder import RecordSummary
from trio_streams.redis.client import RedisClient

from .support import add_entries

__all__ = ["session"]  # the fixture


def summary(**fields: object) -> RecordSummary:
    made = RecordSummary("stream 'orders'", "orders")
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def test_a_backlog_cut_short_by_a_signal_names_the_last_id_written() -> None:
    line = _record_line(
        summary(entries=2, first_seq=1, last_seq=2, first_id="1-0", last_id="2-0"),
        "r.ss", 1.0, "SIGINT",
    )  # fmt: skip
    assert line == (
        "recorded 2 entries of stream 'orders' into r.ss (key 'orders', seq 1..2, ids 1-0..2-0) "
        "in 1.00 s, 2/s; backlog cut short by SIGINT after id 2-0"
    )


def test_a_follow_stopped_by_a_signal_says_so_and_counts_gaps() -> None:
    line = _record_line(summary(backlog_done=True, live=True, gaps=2), "r.ss", 0.0, "SIGTERM")
    assert line.endswith("in 0.00 s, -; 2 gap(s) while reconnecting; stopped by SIGTERM")


def test_the_live_rate_is_over_the_last_pages_in_the_window() -> None:
    assert live_rate(summary(marks=[(0.0, 0)])) == 0.0
    assert live_rate(summary(marks=[(0.0, 0), (1.0, 100), (2.0, 300)])) == 150.0
    assert live_rate(summary(marks=[(0.0, 0), (10.0, 100), (12.0, 300)]), window=5) == 100.0


async def test_plain_progress_prints_at_most_one_line_a_second_by_trios_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    out = io.StringIO()
    progress = PlainProgress(out, every=1.0)
    state = summary(backlog_total=10)
    for n in range(5):
        state.entries = n
        progress(state)
    await trio.sleep(1.0)
    progress(state)
    state.backlog_done = state.live = True
    progress(state)  # a new phase shows at once
    assert out.getvalue().splitlines() == [
        "recording stream 'orders': 0/10 entries",
        "recording stream 'orders': 4/10 entries",
        "following stream 'orders': 4 entries, 0.0/s",
    ]


@pytest.mark.usefixtures("redis")
async def test_on_a_terminal_the_recording_draws_a_progress_bar(
    redis_server: RedisServer, redis: RedisClient, session: str, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 5)
    command = (
        f"cd {ROOT} && {sys.executable} -m trio_streams record {redis_server.url} orders "
        f"--to {tmp_path / 'r.ss'}; echo EXITED $?; read line"
    )
    await trio.to_thread.run_sync(
        tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "20", command
    )
    screen = await screen_shows(session, "EXITED 0")
    assert "recording stream 'orders'" in screen and "5/5" in screen
    assert "recorded 5 entries of stream 'orders'" in screen


def test_the_rich_bar_counts_on_without_a_total_once_following() -> None:
    from trio_streams.record.progress import RichProgress
    from trio_streams.record.recorder import RecordSummary

    progress = RichProgress()
    try:
        summary = RecordSummary(source="stream 'orders'", key="orders", backlog_total=1)
        summary.entries = 1
        progress(summary)
        summary.live, summary.backlog_done, summary.entries = True, True, 31
        progress(summary)
        backlog, live = progress._bar.tasks
    finally:
        progress.close()
    assert (backlog.completed, backlog.total) == (1, 1)  # the backlog, done
    assert (live.completed, live.total) == (31, None)  # following: no "31/1"
