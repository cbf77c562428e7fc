"""A real terminal for tests: tmux runs a command, ``send-keys`` types, ``capture-pane`` reads
the screen (tmux comes with the test setup: the noxfile installs it with the servers)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import trio

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


async def start_top(session: str, target: str, *args: str, columns: int, rows: int) -> None:
    """``trio-streams top TARGET ARGS`` in a new tmux session ``session`` of ``columns`` x
    ``rows``; once it exits, ``EXITED STATUS`` shows and the pane waits for a line."""
    import sys

    from tests.cli.support import ROOT

    command = (
        f"cd {ROOT} && {sys.executable} -m trio_streams top {target} {' '.join(args)}; "
        "echo EXITED $?; read line"
    )
    await trio.to_thread.run_sync(
        tmux, "new-session", "-d", "-s", session, "-x", str(columns), "-y", str(rows), command
    )
