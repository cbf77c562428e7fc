"""A failure that stops an app or a command, told in one line per error.

An operator reads the last lines of a failed run: they name what failed, where, and what to do,
not the nursery structure it came through. :func:`failure_lines` gives one line per error (the
leaves of a group; cancellations left out), each with the error's own hint
(:meth:`TrioStreamsError.hint <trio_streams.core.errors.TrioStreamsError.hint>`, also found on its
``__cause__``) or else a pointer to the traceback, which :func:`report` logs at DEBUG.
"""

from __future__ import annotations

import logging
from typing import TextIO

import trio

from .errors import TrioStreamsError
from .groups import leaves

__all__ = ["describe", "failure_lines", "hint_for", "innermost", "report", "with_cause"]


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def describe(error: BaseException) -> str:
    """What ``error`` says, on one line: its own message for an error trio-streams raised on
    purpose (they name what and where), else its type and message; then its notes."""
    if isinstance(error, TrioStreamsError):
        text = str(error)
    else:
        message = str(error)
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    notes = [_one_line(note) for note in getattr(error, "__notes__", ()) if isinstance(note, str)]
    text = _one_line(text)
    return f"{text} ({'; '.join(notes)})" if notes else text


def innermost(error: BaseException) -> BaseException:
    """The error at the bottom of ``error``'s ``__cause__`` chain, through groups (their first
    leaf that is not a cancellation): what went wrong first, under the errors that only say
    what it broke (``ConnectionRefusedError`` under "cannot connect", under a lost read)."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, BaseExceptionGroup):
            error = _real(error)[0]
        elif error.__cause__ is not None:
            error = error.__cause__
        else:
            break
    return error


def with_cause(error: BaseException, said: str | None = None) -> str:
    """``said`` (by default what ``error`` says), then ``cause: ...``, the :func:`innermost`
    error of its chain, unless that is ``error`` itself or ``said`` names it already."""
    text = str(error) if said is None else said
    cause = innermost(error)
    if cause is error or describe(cause) in text:
        return text
    return f"{text}; cause: {describe(cause)}"


def hint_for(error: BaseException) -> str | None:
    """The hint of ``error``, or of the first error in its ``__cause__`` chain that has one."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TrioStreamsError):
            hint = current.hint()
            if hint:
                return hint
        current = current.__cause__
    return None


def _line(error: BaseException, traceback_hint: str) -> str:
    text = describe(error)
    hint = hint_for(error)
    if hint is None:
        return f"{text}; {traceback_hint}"
    if hint in text:  # a note already says it
        return text
    return f"{text}; {hint}"


def failure_lines(error: BaseException, *, traceback_hint: str) -> list[str]:
    """One line per error in ``error``: itself, or each leaf of a group (cancellations, which
    only say that something else failed, are left out). An error whose ``__cause__`` is a group
    of several comes first, then each of them, indented."""
    cause = error.__cause__
    if isinstance(cause, BaseExceptionGroup):
        causes = _real(cause)
        if len(causes) > 1:
            return [f"{describe(error)}:"] + [f"  {_line(leaf, traceback_hint)}" for leaf in causes]
    errors = _real(error) if isinstance(error, BaseExceptionGroup) else [error]
    return [_line(leaf, traceback_hint) for leaf in errors]


def _real(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found = leaves(group)
    return [leaf for leaf in found if not isinstance(leaf, trio.Cancelled)] or found


def report(
    error: BaseException,
    *,
    prefix: str,
    out: TextIO,
    logger: logging.Logger,
    traceback_hint: str,
) -> None:
    """Log ``error``'s traceback at DEBUG, then write its :func:`failure_lines` to ``out``,
    each after ``prefix``."""
    logger.debug("%s: the traceback of the failure", prefix, exc_info=error)
    for line in failure_lines(error, traceback_hint=traceback_hint):
        out.write(f"{prefix}: {line}\n")
    out.flush()
