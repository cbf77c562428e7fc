"""What a pipeline-window segment may hold, checked as the handler queues each command.

A segment is sent after its handler returned, with acknowledgements of other deliveries, so a
command that would break that flush is refused at the call, in the handler (where the error
names the handler's line), never when the flush is already on its way:

- commands the client refuses on a shared connection (``SUBSCRIBE``, ``SELECT``...), and
  blocking commands (``BLPOP``, ``XREAD ... BLOCK``...), which would hold every flush behind
  them;
- a command the connected server does not have (``HSETEX`` on a server older than it): it
  would fail inside the flush; refused naming the server;
- with ``atomic=True``, a segment is one MULTI/EXEC with the delivery's XACK, so its keys
  must be known when it is queued: they are read from the connected server's command table
  (its key positions, and for commands whose keys move with their arguments, its full key
  specifications: ``GEORADIUS ... STORE``, ``LMPOP``, a module's commands...). A command whose
  keys that table cannot say (a key spec the server marks ``incomplete`` or ``unknown``:
  ``SORT``, ``MIGRATE``) is refused, on any server, so that what runs on a standalone server
  also runs on a cluster: the queue call is synchronous, so ``COMMAND GETKEYS`` cannot be
  asked there;
- and in a cluster every key a segment names must hash to the subscription key's slot: a key
  of another slot is refused (naming the key and both slots).

Where no server's table is at hand (before the broker connected, and under ``app.test()``),
the committed snapshot (:data:`~.client.capabilities.SNAPSHOT`: the commands of every server
the project is tested against) stands in, so a segment the in-process window accepts is one
a server with those commands is sent.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.errors import ConfigurationError
from ..core.pipeline import Command, CommandCheck
from .client.capabilities import SNAPSHOT, ServerCommands
from .client.commands import BLOCKING, block_seconds, kind_of, refusal
from .client.keys import key_slot
from .companions import companion_key

__all__ = ["SegmentRefused", "segment_check"]


def _snapshot() -> ServerCommands:
    return SNAPSHOT


class SegmentRefused(ConfigurationError):
    """A command a pipeline-window segment cannot hold; the message says why and names the key
    or command. Raised in the handler, at the call that queued it: nothing of it is sent."""


def segment_check(
    label: str,
    *,
    atomic: bool,
    slot_key: str | None,
    commands: Callable[[], ServerCommands] = _snapshot,
) -> CommandCheck:
    """The check for segments of subscription ``label``. ``slot_key``: in a cluster with
    ``atomic=True``, the key whose slot every key of a segment must hash to (None elsewhere).
    ``commands``: the connected server's table as last read (the client's
    :attr:`~.client.RedisClient.commands`, asked at each call, so a table read again after a
    reconnect is the one used); the snapshot when there is no server."""
    slot = None if slot_key is None or not atomic else key_slot(slot_key)

    def check(command: Command) -> None:
        name = command[0]
        shown = name if isinstance(name, str) else name.decode(errors="replace")
        kind = kind_of(command)
        if kind:
            _check_kind(label, command, kind, shown)
        table = commands()
        if not table.is_snapshot and not table.has(shown):
            raise SegmentRefused(
                f"{label}: {table.source} has no command {shown}: it would fail inside the "
                "flush that carries other deliveries' acknowledgements; use a command this "
                "server has"
            )
        if not atomic:
            return
        keys = _keys(table, command)
        if keys is None:
            why = (
                f"{shown} is not in the committed snapshot of commands"
                if table.is_snapshot and not table.has(shown)
                else f"{table.source}'s key specifications of {shown} do not say them, and "
                "COMMAND GETKEYS cannot be asked while a handler queues"
            )
            raise SegmentRefused(
                f"{label}: the keys of {shown} cannot be known without the server ({why}), and "
                "with atomic=True every key of a segment must be known when it is queued (in a "
                "cluster, to check it shares the stream's slot): use a command whose keys are "
                "known, or a subscription without atomic=True"
            )
        if slot is None:
            return
        assert slot_key is not None
        for key in keys:
            if key_slot(key) != slot:
                raise SegmentRefused(
                    f"{label}: {shown} names key {key!r} (cluster slot {key_slot(key)}), but "
                    f"with atomic=True a segment runs in one MULTI/EXEC with the XACK of "
                    f"{slot_key!r} (slot {slot}): name it in that slot, e.g. "
                    f"{companion_key(slot_key, '...')!r}"
                )

    return check


def _check_kind(label: str, command: Command, kind: int, shown: str) -> None:
    """Refuse what the client refuses on a shared connection, and blocking commands."""
    error = refusal(command, kind)
    if error is not None:
        raise SegmentRefused(f"{label}: {error}")
    if kind & BLOCKING and block_seconds(command) != 0:
        raise SegmentRefused(
            f"{label}: {shown} blocks, and a segment is sent with the acknowledgements of "
            "other deliveries: it would hold them all; queue a non-blocking command"
        )


def _keys(table: ServerCommands, command: Command) -> list[str | bytes] | None:
    name = command[0]
    if not table.has(name if isinstance(name, str) else name.decode(errors="replace")):
        return None
    keys = table.finder.keys(command)
    return None if keys is None else [k for k in keys if isinstance(k, str | bytes)]
