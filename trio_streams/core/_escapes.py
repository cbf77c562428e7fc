"""User code that raises a ``BaseException`` which is not a cancellation.

A handler, hook or task that calls ``sys.exit(3)`` (or raises its own ``BaseException``
subclass) would otherwise go through every ``except Exception`` on its way out, past the
failure policy, and crash the process with a nested exception group. :func:`escaped` turns it
into a :class:`~trio_streams.core.errors.BaseExceptionRaised` naming the code, which stops the app
as any fatal error does. A cancellation (``trio.Cancelled``), ``KeyboardInterrupt`` and
``GeneratorExit`` are left as they are: they are how Trio and Python stop code.
"""

from __future__ import annotations

import trio

from .errors import BaseExceptionRaised
from .groups import leaves

__all__ = ["escaped"]

_STOPPING = (trio.Cancelled, KeyboardInterrupt, GeneratorExit)


def escaped(error: BaseException, where: str) -> BaseExceptionRaised | None:
    """``error``, raised by the code ``where`` names, as the error that stops the app (raise it
    ``from error``); None when it is a cancellation (or a group holding one), or an
    ``Exception``, and must go on as it is."""
    if isinstance(error, (Exception, *_STOPPING)):
        return None
    if isinstance(error, BaseExceptionGroup) and error.split(_STOPPING)[0] is not None:
        return None
    found = leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    what = repr(found[0]) if len(found) == 1 else repr(error)
    return BaseExceptionRaised(f"{where} raised {what}")
