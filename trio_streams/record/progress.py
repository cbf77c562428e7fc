"""What a recording shows while it runs: a progress bar for a backlog, a live rate while
following, then one summary line.

On a terminal (stderr is a TTY) and with ``rich`` installed (the ``tui`` extra), a bar that
rich redraws when a page is written (``auto_refresh=False``: no refresh thread, nothing runs
that the recording does not own). Otherwise one plain line on stderr at most every
``every`` seconds (Trio's clock), so a log file gets a readable trace instead of escape codes.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import trio

from ..core.extras import available, importing, require
from .recorder import RecordSummary

__all__ = ["PlainProgress", "Progress", "RichProgress", "live_rate", "make_progress"]


def live_rate(summary: RecordSummary, window: float = 5.0) -> float:
    """Entries per second over the last ``window`` seconds of pages (0.0 before two pages)."""
    marks = summary.marks
    if len(marks) < 2:
        return 0.0
    now, count = marks[-1]
    at, then = marks[0]
    for at, then in marks:  # noqa: B007 - the first mark inside the window
        if now - at <= window:
            break
    if now <= at:
        return 0.0
    return (count - then) / (now - at)


class Progress:
    """The interface: called after each page, closed once at the end."""

    def __call__(self, summary: RecordSummary) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class PlainProgress(Progress):
    """One line per ``every`` seconds on ``out``."""

    def __init__(self, out: TextIO, every: float = 1.0) -> None:
        self._out = out
        self._every = every
        self._shown_at: float | None = None
        self._phase = ""

    def __call__(self, summary: RecordSummary) -> None:
        now = trio.current_time()
        if summary.backlog_done and not summary.live:
            return  # the summary line says the rest
        phase = "following" if summary.live else "backlog"
        shown_at = self._shown_at
        if phase == self._phase and shown_at is not None and now - shown_at < self._every:
            return
        self._phase, self._shown_at = phase, now
        if phase == "backlog":
            total = "" if summary.backlog_total is None else f"/{summary.backlog_total}"
            line = f"recording {summary.source}: {summary.entries}{total} entries"
        else:
            line = (
                f"following {summary.source}: {summary.entries} entries, {live_rate(summary):.1f}/s"
            )
        self._out.write(line + "\n")
        self._out.flush()


class RichProgress(Progress):
    """A rich progress bar on stderr, redrawn by the recording itself."""

    def __init__(self) -> None:
        with importing("tui", "--progress bar"):
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar

        self._bar: Any = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            auto_refresh=False,
            transient=False,
        )
        self._task: Any = None
        self._live: Any = None
        self._bar.start()

    def __call__(self, summary: RecordSummary) -> None:
        if self._task is None:
            self._task = self._bar.add_task(
                f"recording {summary.source}", total=summary.backlog_total
            )
        if summary.live:
            description = f"following {summary.source}: {live_rate(summary):.1f}/s"
            if self._live is None:
                # Live, there is no total to fill: the backlog's bar is done, and a task with
                # no total (a pulsing bar, "entries/?") counts on from here.
                self._bar.update(self._task, completed=summary.backlog_total or summary.entries)
                self._live = self._bar.add_task(description, total=None)
            self._bar.update(self._live, completed=summary.entries, description=description)
        else:
            self._bar.update(self._task, completed=summary.entries, total=summary.backlog_total)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.stop()


def rich_available() -> bool:
    return available("tui")


def make_progress(mode: str, err: TextIO = sys.stderr) -> Progress | None:
    """``auto`` (a bar on a terminal with rich, plain lines elsewhere), ``bar``, ``plain``, or
    ``none`` (None)."""
    if mode == "none":
        return None
    if mode == "bar" or (mode == "auto" and err.isatty() and rich_available()):
        require("tui", "--progress bar")
        return RichProgress()
    return PlainProgress(err)
