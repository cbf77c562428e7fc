"""Pipelines and MULTI/EXEC transactions: queue commands, send them in one write.

The builders hold no connection; ``execute`` hands the queued commands to the client, which
picks the connection(s). That keeps a pipeline cheap to build in a handler and lets the cluster
client split it per node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .errors import Address, ExecAbortError, RedisError, ReplyError, WatchError, describe_command
from .protocol import Command
from .replies import Replies

Runner = Callable[[Sequence[Command]], Awaitable[Replies]]


class Pipeline:
    """Commands queued with :meth:`add`, sent together by :meth:`execute`.

    Replies come back in order, error replies in place (:class:`~.replies.Replies`).
    A pipeline is not atomic: other clients' commands may run between its commands.
    """

    __slots__ = ("_commands", "_runner")

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._commands: list[Command] = []

    def add(self, *args: Any) -> Pipeline:
        """Queue one command; returns the pipeline so calls can be chained."""
        self._commands.append(args)
        return self

    def extend(self, commands: Sequence[Command]) -> Pipeline:
        """Queue several commands."""
        self._commands.extend(commands)
        return self

    @property
    def commands(self) -> list[Command]:
        """The queued commands, in order."""
        return self._commands

    def __len__(self) -> int:
        return len(self._commands)

    async def execute(self, *, raise_on_error: bool = False) -> Replies:
        """Send the queued commands and return their replies; the queue is emptied.

        With ``raise_on_error`` the first error reply is raised instead of returned.
        """
        commands, self._commands = self._commands, []
        replies = await self._runner(commands)
        if raise_on_error:
            replies.raise_first()
        return replies


class Transaction(Pipeline):
    """A MULTI/EXEC block: queued commands run together, no other client's in between.

    ``execute`` returns the EXEC replies (errors of commands that failed while running stay in
    place: Redis has no rollback, the other commands' effects remain). If the server rejected a
    command while queueing, nothing ran and :class:`~.errors.ExecAbortError` is raised.
    """

    __slots__ = ()


def wrap_transaction(commands: Sequence[Command]) -> list[Command]:
    """The wire form of a transaction: MULTI, the commands, EXEC."""
    return [("MULTI",), *commands, ("EXEC",)]


def unwrap_transaction(
    replies: Replies, commands: Sequence[Command], address: Address | None
) -> Replies:
    """EXEC's replies from the replies to :func:`wrap_transaction`'s commands.

    Raises the MULTI error, :class:`ExecAbortError` (with each queueing error) or
    :class:`WatchError`.
    """
    if isinstance(replies[0], RedisError):
        raise replies[0]
    result = replies[-1]
    if isinstance(result, ExecAbortError):
        result.errors = [r for r in replies[1:-1] if isinstance(r, ReplyError)]
        if result.errors:
            first = result.errors[0]
            result.message = f"{result.message} (first rejected: {first.message})"
        raise result
    if isinstance(result, RedisError):
        raise result
    if result is None:
        raise WatchError(
            f"transaction of {len(commands)} commands did not run: a watched key changed"
        )
    out = Replies(result)
    for reply, args in zip(out, commands, strict=False):
        if isinstance(reply, ReplyError):
            reply.with_context(describe_command(args), address)
    return out
