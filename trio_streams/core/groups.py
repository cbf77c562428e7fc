"""Exception groups from our own nurseries, reduced to the error that happened.

Trio's nurseries wrap whatever their tasks raise in an ``ExceptionGroup`` (strict exception
groups), and an app nests several: the app's, each subscription's, the test harness's. One error
raised somewhere inside comes out wrapped once per level. At the edge of a structure we own
(``App.serve``, ``app.run()``, ``app.test()``), a group whose only leaf is one ``Exception`` is
unwrapped and that exception raised as itself, with its own traceback, cause and context. A
group of several errors stays a group (nothing is hidden), and so does any group that holds a
``BaseException`` that is not an ``Exception`` (``trio.Cancelled``, ``KeyboardInterrupt``): a
cancellation is never turned into something else, nor lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import NoReturn

import trio

__all__ = ["leaves", "lone_error", "open_nursery", "raise_lone_errors", "reraise_unwrapped"]


def leaves(error: BaseException) -> list[BaseException]:
    """Every exception inside ``error`` that is not itself a group, in order."""
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    return [leaf for inner in error.exceptions for leaf in leaves(inner)]


def lone_error(error: BaseException) -> Exception | None:
    """The one ``Exception`` nested groups hold, or None if they hold more, or anything else."""
    while isinstance(error, BaseExceptionGroup):
        if len(error.exceptions) != 1:
            return None
        error = error.exceptions[0]
    return error if isinstance(error, Exception) else None


def reraise_unwrapped(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raise the lone error of ``group`` as itself if it has one, else ``group``.

    Call it in the ``except`` block that caught ``group``. The error keeps its traceback (which
    starts where it was raised), its ``__cause__`` and its ``__context__``: raising it here
    would otherwise make the group its context, and print every level again.
    """
    error = lone_error(group)
    if error is None:
        raise group
    cause, context, suppress = error.__cause__, error.__context__, error.__suppress_context__
    try:
        raise error
    finally:
        error.__cause__, error.__context__ = cause, context
        error.__suppress_context__ = suppress
        del error, group


@contextmanager
def raise_lone_errors() -> Iterator[None]:
    """Around a nursery of ours: a group with one ``Exception`` leaf leaves as that error."""
    try:
        yield
    except BaseExceptionGroup as group:
        reraise_unwrapped(group)


@asynccontextmanager
async def open_nursery() -> AsyncIterator[trio.Nursery]:
    """``trio.open_nursery()`` whose lone error leaves as itself (:func:`raise_lone_errors`)."""
    with raise_lone_errors():
        async with trio.open_nursery() as nursery:
            yield nursery
