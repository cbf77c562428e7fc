"""SIGINT and SIGTERM before Trio watches them: a stop asked for while a process starts.

Trio hears a signal only inside ``trio.open_signal_receiver``. Before that — the interpreter
importing trio-streams and the app, the command line being parsed, ``trio.run`` starting —
Python's defaults apply, and none of them is what a service asked to stop should do: SIGINT
raises ``KeyboardInterrupt`` wherever the code is (a traceback on the terminal), or is ignored
outright in a process that a non-interactive shell started with ``&`` (it inherits SIGINT
ignored, and Python then leaves it so); SIGTERM ends the process without a word.

``trio-streams run`` installs this guard as its first step, whatever the inherited handlers
were (a service asked to stop by SIGINT stops, even when started in the background), and
``App.run`` for the time of its ``trio.run``. The guard has two modes:

- **raising**, outside Trio: the first signal raises :class:`StopSignal` where the code is (an
  import that blocks, the command line being read), so the process stops at once and the
  command reports it in one line; later ones are only recorded, so stopping is not itself
  interrupted;
- **holding**, while Trio runs: signals are only recorded, never raised into Trio's own
  machinery, and whoever opens the signal receiver takes them (:func:`take`) right after
  opening it: one that came before the receiver is handled as if the receiver had heard it.

Signal handlers belong to the main thread: elsewhere the guard does nothing (and Trio's
receiver cannot be opened there either).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = [
    "STOP_SIGNALS",
    "StopSignal",
    "hold",
    "holding",
    "install",
    "pending",
    "take",
    "uninstall",
]

#: The signals that ask a trio-streams process to stop.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a few ms)
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    _Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


class StopSignal(BaseException):
    """SIGINT or SIGTERM came while the process was starting, outside Trio: stop at once.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so an ``except Exception`` in the code it
    interrupts (the app's module being imported) does not swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"{self.name} received")


class _Guard:
    def __init__(self) -> None:
        self.received: list[int] = []
        self.raising = False
        self.previous: dict[int, _Handler] | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.raising:
            self.raising = False  # one raise: a signal while stopping is only recorded
            raise StopSignal(signum)


_guard = _Guard()


def install(*, raising: bool) -> bool:
    """Handle SIGINT and SIGTERM with the guard from now on, in the mode given.

    Returns True if this call installed it, False if it was installed already (the mode is
    set either way) or this is not the main thread (nothing is done)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    _guard.raising = raising
    if _guard.previous is not None:
        return False
    _guard.previous = {signum: signal.signal(signum, _guard.handle) for signum in STOP_SIGNALS}
    return True


def uninstall() -> None:
    """Put back the handlers the guard replaced, and forget what it recorded."""
    previous, _guard.previous = _guard.previous, None
    _guard.raising = False
    _guard.received.clear()
    if previous is None:
        return
    for signum, handler in previous.items():
        # None: a handler not set from Python, which cannot be put back; the default is.
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def pending() -> StopSignal | None:
    """The first signal recorded and not taken, as the error raising mode would raise."""
    return StopSignal(_guard.received[0]) if _guard.received else None


def hold() -> None:
    """From now on only record signals (Trio is about to run); first, raise the one that came
    already if the code it interrupted swallowed it (an ``except BaseException`` at import)."""
    _guard.raising = False
    stop = pending()
    if stop is not None:
        raise stop


def take() -> list[int]:
    """The signals recorded and not taken yet, oldest first; they are forgotten here."""
    received = list(_guard.received)
    _guard.received.clear()
    return received


@contextmanager
def holding() -> Iterator[None]:
    """Record signals without raising them for the block (``trio.run`` runs in it).

    Installs the guard for the block if it was not installed; otherwise leaves it installed,
    holding: the process is past the point where a signal should interrupt it."""
    installed = install(raising=False)
    try:
        yield
    finally:
        if installed:
            uninstall()
