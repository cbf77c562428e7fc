"""A delivery history shared by processes, and the checker that reads it.

A test under faults needs to know, at the end, what became of every message: was it handled,
lost, run twice, settled though no handler ever ran it? The processes that take part (producers,
consumers killed and restarted, the test itself) each write down what they did in one
append-only file, a :class:`Ledger`, and :meth:`Ledger.check` reads it back and reports.

Records, each one line of JSON:

- ``published(id, lane=None)``: a producer published the message ``id`` (in ``lane``, where the
  order of a lane is kept);
- ``run_began(id, attempt)``: a handler run of ``id`` begins. Written *before* the run, so a
  run the process was killed in is on record;
- ``run_ended(id, outcome)``: the run ended, with the handler's outcome (``"ack"``, ``"drop"``,
  ``"retry"``), ``"cancelled"`` when it was cancelled under way, or ``"not-run"`` when the
  handler was not called after all (the delivery was spent or undecodable): that run does not
  count;
- ``settled(id, how)``: the transport settled the message for good, ``how`` one of ``"ack"``,
  ``"dead-letter"``, ``"drop"``;
- ``effect(id)``: an effect of ``id``'s handling was applied (where the effects are not counted
  elsewhere).

:func:`~trio_streams.testing.faults.ledger_middleware` writes the run and settle records of an
app's handlers without touching them.

**Why lines never interleave.** Each record is one ``os.write`` of one whole line on a
descriptor opened with ``O_APPEND``. POSIX makes such a write move to the end of the file and
write there as one step, so two processes' records never land on the same bytes, and Linux's
local filesystems (ext4, xfs, btrfs, tmpfs) write a regular file's write under the file's lock,
so no other write comes between its bytes. What is left is a short write (a full disk, a
signal in a large write): a line is at most :data:`MAX_LINE` bytes (4096, ``PIPE_BUF``, below
which even a pipe's writes are whole), the ledger checks that ``os.write`` wrote all of it and
raises :class:`LedgerError` otherwise. A network filesystem (NFS) only emulates ``O_APPEND``:
keep the ledger on a local disk or tmpfs. A record is in the kernel once ``os.write`` returns,
so a process killed right after (SIGKILL) loses none; only the machine's crash would.

The file's order is the order of the writes, the same for every process: the checker takes it
as the order of events (no clocks are compared).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Final, Literal

from ._ledger_history import RUN_ENDS, SETTLES, History, Id, Lane, LedgerError, is_attempt
from .ledger_report import LedgerReport, OrderBreak

__all__ = [
    "MAX_LINE",
    "Id",
    "Lane",
    "Ledger",
    "LedgerError",
    "LedgerReport",
    "OrderBreak",
    "RunOutcome",
    "SettleHow",
]

#: The largest record, in bytes, its newline included.
MAX_LINE: Final = 4096

#: How a handler run ended.
RunOutcome = Literal["ack", "drop", "retry", "cancelled", "not-run"]
#: How the transport settled a message for good.
SettleHow = Literal["ack", "dead-letter", "drop"]

_OUTCOMES: Final = RUN_ENDS
_HOWS: Final = SETTLES


class Ledger:
    """One append-only history file, written by every process that opens it.

    ``Ledger(path)`` opens (creating) ``path`` for appending; each process that takes part
    opens its own ``Ledger`` on the same path. Recording is synchronous and takes a few
    microseconds (one ``os.write`` to the page cache): there is no ``await``, so a cancellation
    never leaves half a record. :meth:`check` reads what all of them wrote so far.

    Usable as a context manager, which closes the descriptor; a ledger that is never closed
    is closed when it is collected.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
        self._pid = os.getpid()
        self._history = History(self.path)

    # ---- recording ---------------------------------------------------------------------------

    def published(self, id: Id, lane: Lane | None = None) -> None:
        """``id`` was published (in ``lane``, whose order :meth:`check` holds runs to)."""
        _check_id(id, self.path)
        if lane is not None:
            _check_id(lane, self.path, what="lane")
        self._write({"t": "published", "id": id, "lane": lane})

    def run_began(self, id: Id, attempt: int = 1) -> None:
        """A handler run of ``id`` begins (its ``attempt``, 1 the first time). Write it before
        the handler's first line: a run the process dies in is then on record. ``attempt`` is
        an int >= 1 (not a bool): ``TypeError`` or ``ValueError`` otherwise, nothing written."""
        _check_id(id, self.path)
        _check_attempt(attempt, self.path)
        self._write({"t": "run", "id": id, "a": attempt})

    def run_ended(self, id: Id, outcome: RunOutcome, *, attempt: int | None = None) -> None:
        """The latest run of ``id`` this process began (of ``attempt``, when given) ended with
        ``outcome``; ``"not-run"`` takes that run back: the handler was not called."""
        _check_id(id, self.path)
        if attempt is not None:
            _check_attempt(attempt, self.path)
        if outcome not in _OUTCOMES:
            raise ValueError(f"{self.path}: a run ends with one of {sorted(_OUTCOMES)}")
        self._write({"t": "ended", "id": id, "o": outcome, "a": attempt})

    def settled(self, id: Id, how: SettleHow) -> None:
        """The transport settled ``id`` for good: acknowledged, dead-lettered or dropped."""
        _check_id(id, self.path)
        if how not in _HOWS:
            raise ValueError(f"{self.path}: a message is settled as one of {sorted(_HOWS)}")
        self._write({"t": "settled", "id": id, "how": how})

    def effect(self, id: Id) -> None:
        """An effect of handling ``id`` was applied (for effects not counted elsewhere)."""
        _check_id(id, self.path)
        self._write({"t": "effect", "id": id})

    def _write(self, record: dict[str, object]) -> None:
        fd = self._fd
        if fd is None:
            raise LedgerError(f"ledger {self.path} is closed")
        record["pid"] = self._pid
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        if len(line) > MAX_LINE:
            raise LedgerError(
                f"ledger {self.path}: a record of {len(line)} bytes is over the {MAX_LINE}-byte "
                f"limit that keeps lines whole (a shorter id?): {line[:80]!r}..."
            )
        try:
            written = os.write(fd, line)
        except OSError as exc:
            raise LedgerError(f"ledger {self.path}: a record could not be written: {exc}") from exc
        if written != len(line):
            raise LedgerError(
                f"ledger {self.path}: only {written} of a record's {len(line)} bytes were "
                "written (a full disk?): the file now ends in a torn line"
            )

    # ---- checking ----------------------------------------------------------------------------

    def check(
        self,
        *,
        pending: Iterable[Id] | None = None,
        dead_lettered: Iterable[Id] = (),
        effects: Mapping[Id, int] | None = None,
        at_most_once: bool = False,
    ) -> LedgerReport:
        """What became of every published message, from every record written so far.

        - ``pending``: what the server still holds at the end (entries not read yet, read but
          not acknowledged, on a processing list), for a transport that cannot report its
          settles (records written from a handler alone): every published message *not* in it
          is then taken as settled. ``None`` (the default): only ``settled`` records count.
        - ``dead_lettered``: what the server's dead-letter key holds, where no ``settled``
          record says so.
        - ``effects``: the effects counted per message (say, a Redis hash the handlers
          increment in the same MULTI/EXEC as their acknowledgement); ``None``: the ``effect``
          records.
        - ``at_most_once``: the transport may lose messages by design (Pub/Sub, simple lists):
          what would be lost is counted apart, as dropped as the transport allows.

        Reads only what was appended since the last check, so a test may poll it. A line that
        is not a record this ledger writes (written by something else) raises
        :class:`LedgerError` naming the file and the line, at this check and every later one.
        """
        self._history.read_new()
        return self._history.report(
            pending=None if pending is None else set(pending),
            dead_lettered=set(dead_lettered),
            effects=None if effects is None else dict(effects),
            at_most_once=at_most_once,
        )

    # ---- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the descriptor; recording after this raises :class:`LedgerError`."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"<Ledger {str(self.path)!r}>"


def _check_id(value: object, path: Path, *, what: str = "id") -> None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"ledger {path}: a{'n' if what == 'id' else ''} {what} is an int or a "
                        f"str, not {type(value).__name__}")  # fmt: skip


def _check_attempt(value: object, path: Path) -> None:
    if not is_attempt(value):
        raise (ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError)(
            f"ledger {path}: attempt is an int >= 1 (1 the first run), not {value!r}"
        )
