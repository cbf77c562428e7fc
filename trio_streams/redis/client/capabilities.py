"""What the connected server can do, read from its own command table.

Newer servers offer commands and options that do a job better (``XACKDEL``, trimming that
spares what a group has not acknowledged, key specs of commands newer than the committed
snapshot...). Whether a server has them is read from the server itself — ``COMMAND`` for which
commands exist and where their keys are, ``COMMAND DOCS`` for the options (tokens) a command
takes — never from a version string: Redis and Valkey number their releases apart, and a
managed service may rename or remove commands. One code path serves every server.

A client reads the table once (:meth:`~.client.RedisClient.server_commands`) and keeps it; a
connection opened after the server was lost reads it again before it is used, so a server
upgraded or failed over to a different build is seen as it is. Until a table has been read
(and under ``app.test()``, where there is no server), :data:`SNAPSHOT` stands in: the committed
key-spec table, which knows no command's options, so it offers nothing newer than Redis 7.0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

from .command_keys import KNOWN_COMMANDS
from .connection import Connection
from .errors import RedisProtocolError, ReplyError
from .keys import KeyFinder, KeySpec, parse_command_table, text

__all__ = ["DOCUMENTED", "SNAPSHOT", "ServerCommands", "parse_command_tokens", "read_commands"]

#: The commands whose options (``COMMAND DOCS`` tokens) the transports ask about. Reading the
#: docs of every command would cost a reply several times the size of ``COMMAND``'s.
DOCUMENTED: Final = ("xadd", "xtrim", "xackdel", "xgroup", "xinfo", "xreadgroup", "client")


@final
class ServerCommands:
    """One server's command table: which commands it has, their key positions, and the
    options of the :data:`DOCUMENTED` commands.

    ``source`` says where the table came from (``"redis 127.0.0.1:6379"``, or ``"snapshot"``)
    for messages that explain a refusal. Immutable once built; a client replaces it whole.
    """

    __slots__ = ("_keys", "_tokens", "finder", "source")

    def __init__(
        self,
        keys: Mapping[str, KeySpec],
        tokens: Mapping[str, frozenset[str]],
        *,
        source: str,
    ) -> None:
        self._keys = dict(keys)
        self._tokens = dict(tokens)
        #: Finds the key arguments of a command from this table.
        self.finder = KeyFinder(self._keys)
        self.source = source

    def __repr__(self) -> str:
        return f"<ServerCommands from {self.source}: {len(self._keys)} commands>"

    @property
    def is_snapshot(self) -> bool:
        """True for the committed table that stands in before a server answered."""
        return self is SNAPSHOT

    def has(self, name: str) -> bool:
        """Whether the server has command ``name`` (``"xackdel"``, or a subcommand as
        ``"client|setinfo"``); case does not matter."""
        return name.lower() in self._keys

    def takes(self, command: str, token: str) -> bool:
        """Whether ``command`` (one of :data:`DOCUMENTED`, or ``"xgroup|setid"``) takes the
        option ``token`` (``"ACKED"``, ``"ENTRIESREAD"``), as its ``COMMAND DOCS`` say.

        False for a command whose docs were not read (the snapshot reads none): an option is
        used only where the server said it has it.
        """
        return token.upper() in self._tokens.get(command.lower(), frozenset())

    def names(self) -> list[str]:
        """Every command and subcommand of the table (lower case, ``container|sub``), sorted."""
        return sorted(self._keys)

    def keys(self, name: str) -> KeySpec | None:
        """The key positions of command ``name``, or None if the server has no such command."""
        return self._keys.get(name.lower())


#: The committed key-spec table (:mod:`.command_keys`): what is known without a server.
SNAPSHOT: Final = ServerCommands(KNOWN_COMMANDS, {}, source="the committed command snapshot")


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A RESP3 map, or a RESP2 flat ``[key, value, ...]`` list, as key/value pairs."""
    if isinstance(reply, dict):
        return list(reply.items())
    if isinstance(reply, list) and len(reply) % 2 == 0:
        return list(zip(reply[::2], reply[1::2], strict=True))
    raise RedisProtocolError(
        f"COMMAND DOCS: expected a map or a list of pairs, got {type(reply).__name__}"
    )


def _argument_tokens(arguments: Iterable[Any], into: set[str]) -> None:
    for argument in arguments:
        fields = {text(k): v for k, v in _pairs(argument)}
        token = fields.get("token")
        if token is not None:
            into.add(text(token).upper())
        nested = fields.get("arguments")
        if isinstance(nested, list):
            _argument_tokens(nested, into)


def parse_command_tokens(reply: Any) -> dict[str, frozenset[str]]:
    """``name -> option tokens`` from a ``COMMAND DOCS`` reply (RESP2 or RESP3); subcommands
    as ``container|sub``, each with its own tokens."""
    tokens: dict[str, frozenset[str]] = {}

    def add(name: str, docs: Any) -> None:
        fields = {text(k): v for k, v in _pairs(docs)}
        found: set[str] = set()
        arguments = fields.get("arguments")
        if isinstance(arguments, list):
            _argument_tokens(arguments, found)
        tokens[name] = frozenset(found)
        subcommands = fields.get("subcommands")
        if subcommands is not None:
            for sub, sub_docs in _pairs(subcommands):
                add(text(sub).lower(), sub_docs)

    for name, docs in _pairs(reply):
        add(text(name).lower(), docs)
    return tokens


async def read_commands(connection: Connection, *, source: str) -> ServerCommands:
    """Read the server's command table over ``connection``: ``COMMAND`` and the docs of the
    :data:`DOCUMENTED` commands, in one round trip.

    A server whose ``COMMAND DOCS`` is missing (before Redis 7.0) or refused (an ACL) gives a
    table with no options known, so no option is used; a refused ``COMMAND`` raises the
    server's :class:`~.errors.ReplyError`. Cancellation closes the connection, as for any
    command.
    """
    commands: Sequence[tuple[str, ...]] = (("COMMAND",), ("COMMAND", "DOCS", *DOCUMENTED))
    table, docs = await connection.execute_many(commands)
    if isinstance(table, ReplyError):
        raise table
    tokens = {} if isinstance(docs, ReplyError) else parse_command_tokens(docs)
    return ServerCommands(parse_command_table(table), tokens, source=source)
