"""The replies of a pipeline: in command order, with error replies kept in place."""

from __future__ import annotations

from typing import Any

from .errors import RedisError


class Replies(list[Any]):
    """A pipeline's replies in the order the commands were queued.

    An error reply is a :class:`~.errors.ReplyError` value at its command's index, so one failing
    command does not hide what the others returned; :meth:`raise_first` turns the first one into
    an exception for callers that want all-or-nothing.
    """

    __slots__ = ()

    @property
    def errors(self) -> list[tuple[int, RedisError]]:
        """``(index, error)`` for every error reply, in order."""
        return [(i, r) for i, r in enumerate(self) if isinstance(r, RedisError)]

    def raise_first(self) -> Replies:
        """Raise the first error reply, if any; otherwise return self (for chaining)."""
        for reply in self:
            if isinstance(reply, RedisError):
                raise reply
        return self
