"""Pipelines and MULTI/EXEC transactions: queue commands, send them in one write.

The builders hold no connection; ``execute`` hands the queued items to the client, which picks
the connection(s). That keeps a pipeline cheap to build in a handler and lets the cluster client
split it per node. An item is either one command or a :class:`TransactionBlock` (MULTI, its
commands, EXEC), which always travels whole on one connection. A pipeline may mix both, so side
effects and acknowledgements of many deliveries can leave in one round trip, each delivery's
share atomic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .commands import KINDS, check_command
from .errors import Address, ExecAbortError, RedisError, ReplyError, WatchError, describe_command
from .protocol import Command
from .replies import Replies


class TransactionBlock:
    """Commands to run as one MULTI/EXEC block inside a pipeline."""

    __slots__ = ("commands",)

    def __init__(self, commands: Sequence[Command]) -> None:
        self.commands = tuple(commands)
        for command in self.commands:
            check_command(command)

    def __repr__(self) -> str:
        return f"<TransactionBlock of {len(self.commands)} commands>"


Item = Command | TransactionBlock
Runner = Callable[[Sequence[Item]], Awaitable[Replies]]


class Pipeline:
    """Commands queued with :meth:`add` (and blocks with :meth:`add_transaction`), sent
    together by :meth:`execute`.

    Replies come back in order, one per item, error replies in place (:class:`Replies`).
    A pipeline is not atomic: other clients' commands may run between its items.
    """

    __slots__ = ("_items", "_runner")

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._items: list[Item] = []

    def add(self, *args: Any) -> Pipeline:
        """Queue one command; returns the pipeline so calls can be chained.

        An empty or refused command (see :mod:`.commands`) raises here, at the call.
        """
        try:
            kind = KINDS[args[0]]
        except (KeyError, IndexError, TypeError):
            kind = -1  # a name not seen yet, or an empty command: check it in full
        if kind:
            check_command(args)
        self._items.append(args)
        return self

    def extend(self, commands: Sequence[Command]) -> Pipeline:
        """Queue several commands (each checked like :meth:`add`)."""
        for command in commands:
            check_command(command)
        self._items.extend(commands)
        return self

    def add_transaction(self, commands: Sequence[Command]) -> Pipeline:
        """Queue a MULTI/EXEC block. Its reply is the list of EXEC replies (errors in place),
        or, in place, :class:`~.errors.ExecAbortError` when the server rejected a command of
        the block and none of it ran. In a cluster all its keys must share one slot."""
        self._items.append(TransactionBlock(commands))
        return self

    @property
    def items(self) -> list[Item]:
        """The queued commands and blocks, in order."""
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    async def execute(self, *, raise_on_error: bool = False) -> Replies:
        """Send the queued items and return one reply per item; the queue is emptied.

        With ``raise_on_error`` the first error reply is raised instead of returned.
        """
        items, self._items = self._items, []
        replies = await self._runner(items)
        if raise_on_error:
            replies.raise_first()
        return replies


class Transaction:
    """A MULTI/EXEC block: queued commands run together, no other client's in between.

    ``execute`` returns the EXEC replies. An error of a command that failed while running
    stays in place: Redis has no rollback, the other commands' effects remain. If the server
    rejected a command while queueing, nothing ran and :class:`~.errors.ExecAbortError` is
    raised.
    """

    __slots__ = ("_commands", "_runner")

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._commands: list[Command] = []

    def add(self, *args: Any) -> Transaction:
        """Queue one command; returns the transaction so calls can be chained.

        An empty or refused command (see :mod:`.commands`) raises here, at the call.
        """
        check_command(args)
        self._commands.append(args)
        return self

    @property
    def commands(self) -> list[Command]:
        return self._commands

    def __len__(self) -> int:
        return len(self._commands)

    async def execute(self) -> Replies:
        """Run the block; raise if it did not run (see the class docstring)."""
        commands, self._commands = self._commands, []
        if not commands:
            return Replies()
        (result,) = await self._runner([TransactionBlock(commands)])
        if isinstance(result, RedisError):
            raise result
        assert isinstance(result, Replies)
        return result


def wire_commands(items: Sequence[Item]) -> list[Command]:
    """The commands to send for ``items``: blocks expand to MULTI, commands, EXEC."""
    wire: list[Command] = []
    for item in items:
        if type(item) is TransactionBlock:
            wire.append(("MULTI",))
            wire.extend(item.commands)
            wire.append(("EXEC",))
        else:
            wire.append(item)  # type: ignore[arg-type]
    return wire


def fold_replies(items: Sequence[Item], wire_replies: Replies, address: Address | None) -> Replies:
    """One reply per item from the replies to :func:`wire_commands`: a block's replies fold
    into its EXEC result, or the error that kept it from running (in place)."""
    if len(wire_replies) == len(items):
        return wire_replies  # no blocks
    out = Replies()
    index = 0
    for item in items:
        if type(item) is TransactionBlock:
            end = index + len(item.commands) + 2
            try:
                out.append(unwrap_transaction(wire_replies[index:end], item.commands, address))
            except RedisError as exc:
                out.append(exc)
            index = end
        else:
            out.append(wire_replies[index])
            index += 1
    return out


def unwrap_transaction(
    replies: Sequence[Any], commands: Sequence[Command], address: Address | None
) -> Replies:
    """EXEC's replies from the replies to MULTI, the commands, EXEC.

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
