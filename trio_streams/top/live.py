"""The live view of ``trio-streams top``: a rich table redrawn every interval, and keys.

At any width, every column that holds a value is shown whole: when they do not fit side by
side, they are drawn in bands one under the other, each led by the name column.

Keys: ``s`` cycles the sort order (name, length, rate, pending, lag), ``/`` starts a filter
(type it, Enter applies it, Esc clears it), ``p`` pauses (the screen stays as it is, no
snapshot is taken), ``q`` (or Ctrl-C) quits. The terminal is put in cbreak mode while the view
runs and restored however it ends.

rich draws only when this module asks (``auto_refresh=False``): no refresh thread, so every
task belongs to the view's nursery, and a cancellation stops it at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
import termios
import tty
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from ..core.extras import importing
from ..core.groups import open_nursery
from .render import SORTS
from .view import Screen, Watch

__all__ = ["run_live"]

#: What a missing rich refuses.
LIVE_VIEW = "the live view of top (--once prints text without it)"


@dataclass
class _State:
    sort: str = "name"
    match: str = ""
    typing: str | None = None
    paused: bool = False
    quit: bool = False
    changed: trio.Event = field(default_factory=trio.Event)

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def key(self, char: str) -> None:
        if self.typing is not None:
            if char in ("\r", "\n"):
                self.match, self.typing = self.typing, None
            elif char == "\x1b":
                self.match, self.typing = "", None
            elif char in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            elif char.isprintable():
                self.typing += char
        elif char == "q":
            self.quit = True
        elif char == "s":
            names = list(SORTS)
            self.sort = names[(names.index(self.sort) + 1) % len(names)]
        elif char == "p":
            self.paused = not self.paused
        elif char == "/":
            self.typing = ""
        elif char == "\x1b":
            self.match = ""
        self.poke()


def _renderable(screen: Screen, state: _State, width: int = 80) -> Any:
    with importing("tui", LIVE_VIEW):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

    parts: list[Any] = [Text(screen.title, style="bold")]
    status = f"sort: {state.sort}   filter: {state.match or '-'}"
    if state.typing is not None:
        status += f"   filter> {state.typing}_"
    if state.paused:
        status += "   PAUSED"
    parts.append(Text(status + "   keys: s sort  / filter  p pause  q quit", style="dim"))
    for title, (header, lines) in screen.tables:
        bands, names, fold = _bands(header, lines, width)
        for number, (columns, widths) in enumerate(bands):
            more = f" (columns {number + 1} of {len(bands)})" if len(bands) > 1 else ""
            table = Table(title=title + more, title_justify="left", expand=False, box=None)
            for n in columns:
                justify: Literal["left", "right"] = "left" if n == 0 else "right"
                wrap = n == 0 and fold  # names no cut tells apart: whole, over several lines
                table.add_column(
                    header[n], justify=justify, no_wrap=not wrap,
                    overflow="fold" if wrap else "ellipsis", width=widths[n], min_width=widths[n],
                )  # fmt: skip
            for name, line in zip(names, lines, strict=True):
                cells = [name, *(line[n] for n in columns[1:])]
                table.add_row(*(Text(cell) for cell in cells))  # names are not markup
            parts.append(table)
    return Group(*parts)


#: What a column takes besides its cells: one space on each side.
_PADDING = 2
#: The widest the name column gets before its names are cut (in the middle, with an ellipsis).
_NAME_WIDTH = 40


def _bands(
    header: list[str], lines: list[list[str]], width: int
) -> tuple[list[tuple[list[int], dict[int, int]]], list[str], bool]:
    """The columns to draw, as bands that each fit in ``width``: every column that holds a
    value, at its full width (header and cells are never cut), the name column first in each
    band so a line can be followed across them. Columns with nothing to show (every cell
    empty or ``-``) are left out; a terminal too narrow for even one column besides the names
    cuts the names first. Names too wide are cut in the middle (:func:`_distinct_cuts`), or,
    when no cut keeps different names apart, shown whole over several lines: the names to
    draw come with the bands, with whether they fold."""
    shown = [
        n for n in range(1, len(header)) if any(line[n] not in ("", "-") for line in lines)
    ]  # fmt: skip
    widths = {
        n: max((len(line[n]) for line in lines), default=0) for n in range(len(header))
    }  # fmt: skip
    for n in widths:
        widths[n] = max(widths[n], len(header[n]))
    widest = max((widths[n] for n in shown), default=0)
    room = max(6, width - _PADDING - widest - _PADDING)
    whole = [line[0] for line in lines]
    column = min(widths[0], _NAME_WIDTH, room)
    cut = _distinct_cuts(whole, column)
    names = whole if cut is None else cut
    widths[0] = max([len(header[0]), *map(len, names)]) if cut is not None else column
    bands: list[tuple[list[int], dict[int, int]]] = []
    band: list[int] = []
    used = widths[0] + _PADDING
    for n in shown:
        if band and used + widths[n] + _PADDING > width:
            bands.append(([0, *band], widths))
            band, used = [], widths[0] + _PADDING
        band.append(n)
        used += widths[n] + _PADDING
    bands.append(([0, *band], widths))
    return bands, names, cut is None


def _cut_middle(name: str, width: int, head: int) -> str:
    """``name`` in ``width`` characters: its first ``head``, ``…``, and its end."""
    if len(name) <= width:
        return name
    return f"{name[:head]}…{name[len(name) - (width - 1 - head) :]}"


def _distinct_cuts(names: list[str], width: int) -> list[str] | None:
    """``names`` cut in the middle to ``width`` so that names that differ still do (two groups
    of one long-named stream cut at the same place would otherwise show as one row): a third
    of the width from the start and the rest from the end, where a group's or a consumer's
    own name is, else wherever the cut keeps them apart; None when no single cut does."""
    if width < 2:
        return None
    distinct = len(set(names))
    first = (width - 1) // 3
    for head in (first, *(h for h in range(width - 1) if h != first)):
        shown = [_cut_middle(name, width, head) for name in names]
        if len(set(shown)) == distinct:
            return shown
    return None


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _read_keys(fd: int, state: _State) -> None:
    stream = trio.lowlevel.FdStream(os.dup(fd))
    async with stream:
        while not state.quit:
            data = await stream.receive_some(64)
            if not data:
                return
            for char in data.decode("utf-8", "replace"):
                state.key(char)


async def run_live(watch: Watch, *, interval: float, sort: str, match: str) -> None:
    """Redraw ``watch`` every ``interval`` seconds until ``q`` or a cancellation."""
    with importing("tui", LIVE_VIEW):
        from rich.console import Console
        from rich.live import Live

    state = _State(sort=sort, match=match)
    console = Console()
    stdin = sys.stdin.fileno()
    keys = os.isatty(stdin)
    with contextlib.ExitStack() as stack:
        if keys:
            stack.enter_context(_cbreak(stdin))
        live = stack.enter_context(Live(console=console, auto_refresh=False, screen=False))
        async with open_nursery() as nursery:
            if keys:
                nursery.start_soon(_read_keys, stdin, state)
            await watch.refresh()
            next_at = trio.current_time() + interval
            while not state.quit:
                if trio.current_time() >= next_at and not state.paused:
                    await watch.refresh()
                    next_at = trio.current_time() + interval
                screen = watch.screen(sort=state.sort, match=state.match)
                live.update(_renderable(screen, state, console.width), refresh=True)
                changed = state.changed
                with trio.move_on_at(next_at if not state.paused else float("inf")):
                    await changed.wait()
            nursery.cancel_scope.cancel()
