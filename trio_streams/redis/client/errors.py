"""Typed errors of the Redis client, each naming the server and, where known, the command.

Reply errors are built by the parser from the server's error line (``-CODE message``); the code
picks the subclass so callers can catch a redirect or a permission error without parsing text.
Connection errors always mean "the outcome of anything in flight is unknown": the client never
re-sends such a command by itself.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import ConfigurationError, TrioStreamsError
from .scripts import Script

Address = tuple[str, int]


def format_address(address: Address | None) -> str:
    """``host:port`` (IPv6 hosts in brackets), or ``?`` when the address is not known."""
    if address is None:
        return "?"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: Commands whose first argument may be a secret: only their name is ever shown.
_SECRET_ARGUMENTS = frozenset({"AUTH"})
#: Commands whose first argument is a Lua script: named by its purpose, never shown.
_SCRIPT_COMMANDS = frozenset({"EVAL", "EVAL_RO"})


def describe_command(args: object) -> str:
    """The command name and first argument, enough to say what failed without leaking values
    (``AUTH``'s argument, a password, is never shown; a script is named by its purpose)."""
    if not isinstance(args, (tuple, list)) or not args:
        return "?"
    parts = [_text(args[0]).upper()]
    if len(args) > 1 and parts[0] in _SCRIPT_COMMANDS:
        parts.append(_script_name(args[1]))
    elif len(args) > 1 and parts[0] not in _SECRET_ARGUMENTS:
        parts.append(_text(args[1])[:60])
    return " ".join(parts)


def _script_name(script: object) -> str:
    if isinstance(script, Script):
        return f"(script: {script.purpose})"
    length = len(script) if isinstance(script, (str, bytes, bytearray, memoryview)) else 0
    return f"(a script of {length} characters)"


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    # A lone surrogate would make the message itself unprintable: escape it.
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


class RedisError(TrioStreamsError):
    """Base class of every error the Redis client raises."""


class RedisConnectionError(RedisError, ConnectionError):
    """The connection to a server failed or was lost.

    Anything sent and not yet answered may or may not have run on the server: the client never
    re-sends it; the caller decides whether a retry is safe.
    """

    #: For a cluster pipeline that lost one node: every reply, in order, with this error in
    #: the places of the lost node's commands (whose outcome is unknown).
    partial_replies: list[Any] | None = None

    def __init__(self, reason: str, *, address: Address | None = None, command: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.address = address
        self.command = command

    def __str__(self) -> str:
        what = f" during {self.command}" if self.command else ""
        where = f" {format_address(self.address)}" if self.address else ""
        return f"redis{where}{what}: {self.reason}"


class RedisTimeoutError(RedisConnectionError, TimeoutError):
    """Connecting (or the handshake) took longer than ``connect_timeout``, or a command got no
    reply within ``command_timeout``. The connection is closed; a command that was sent may
    still run on the server."""


class HandshakeError(RedisConnectionError):
    """The server refused a new connection's setup for a reason that passes: it has reached
    ``maxclients``, is loading its dataset (``LOADING``), runs a long script (``BUSY``) or is a
    replica cut off from its primary (``MASTERDOWN``).

    Retryable: nothing was run, and the client paces its next attempts with its backoff.
    ``reply`` is the server's refusal.
    """

    def __init__(
        self,
        reason: str,
        *,
        address: Address | None = None,
        command: str = "",
        reply: ReplyError | None = None,
    ) -> None:
        super().__init__(reason, address=address, command=command)
        self.reply = reply


class PoolTimeoutError(RedisError, TimeoutError):
    """No pooled connection became free in time: every connection of the pool stayed in use."""


class RedisProtocolError(RedisConnectionError):
    """The server sent bytes that are not RESP; the connection is closed."""


class CommandEncodingError(RedisError, TypeError):
    """A command cannot be sent: it is empty, or an argument is not bytes, str, int or float,
    or is a str that is not valid Unicode (a lone surrogate). Nothing was sent.

    ``index`` is the position of the bad argument in the command (0 is the command name),
    or None for an empty command.
    """

    index: int | None = None


class CommandNotAllowedError(RedisError, ValueError):
    """A command that would change the connection's mode or session for everyone who uses it
    next (``SUBSCRIBE``, ``SELECT``, ``MONITOR``, ``CLIENT REPLY``...), refused before
    anything was sent; the message names the API to use instead."""


class CrossSlotError(RedisError, ValueError):
    """A command or transaction names keys of different cluster slots. Nothing was sent."""


class ClusterError(RedisConnectionError):
    """The cluster's slot map could not be read, a slot has no serving node, or redirects
    did not settle: no node could be reached for the command (it was not run)."""


class SentinelError(RedisConnectionError):
    """No sentinel could name a primary for the service, or the named node is not a primary."""


class ReplyError(RedisError):
    """The server answered a command with an error reply (``-CODE message``).

    ``code`` is the first word (``ERR``, ``WRONGTYPE``, ``MOVED``...), ``message`` the whole line.
    ``command`` and ``address`` are filled in when the error is raised from a command.
    """

    code: str
    message: str
    command: str
    address: Address | None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = message.split(" ", 1)[0]
        self.command = ""
        self.address = None

    def with_context(self, command: str, address: Address | None) -> ReplyError:
        """Attach the command and server this reply answered; returns self for ``raise``."""
        self.command = command
        self.address = address
        return self

    def __str__(self) -> str:
        if not self.command:
            return self.message
        return f"{self.message} (command {self.command} on redis {format_address(self.address)})"


class ConnectionSetupError(ReplyError, ConfigurationError):
    """The server refused a new connection's setup because of the client's configuration:
    the ACL user may not run ``HELLO``/``SELECT``/``PING``, the database index is out of range...

    Not retryable: the same configuration meets the same refusal. It is raised at once, never
    retried by the client; ``code`` and ``command`` say which part of the setup was refused.
    """

    #: What to check, added to the message when the error comes from a connection's setup
    #: (part of the message itself, so ``hint()`` adds nothing more).
    setup_hint: str = ""

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}: {self.setup_hint}" if self.setup_hint else text


class AuthenticationError(ConnectionSetupError):
    """The server refused the username or password (``WRONGPASS`` / ``NOAUTH``)."""


class NoPermissionError(ReplyError):
    """The ACL user may not run this command or touch this key (``NOPERM``)."""


class ReadOnlyError(ReplyError):
    """A write reached a replica (``READONLY``): typically the primary failed over."""


class ExecAbortError(ReplyError):
    """EXEC refused the transaction because a queued command was rejected (``EXECABORT``).

    ``errors`` holds the queueing errors in order; no command of the transaction ran.
    """

    errors: list[ReplyError]


class WatchError(RedisError):
    """A watched key changed before EXEC: the transaction did not run (EXEC replied nil)."""


class ClusterRedirect(ReplyError):
    """A cluster redirect: the key's slot is served by another node."""

    slot: int
    target: Address

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _, slot, endpoint = message.split(" ", 2)
        host, _, port = endpoint.rpartition(":")
        self.slot = int(slot)
        self.target = (host.strip("[]"), int(port))


class MovedError(ClusterRedirect):
    """``MOVED slot host:port``: the slot now lives on another node (refresh the map)."""


class AskError(ClusterRedirect):
    """``ASK slot host:port``: this one key is being migrated; ask the target once."""


class TryAgainError(ReplyError):
    """``TRYAGAIN``: a multi-key command hit a slot in the middle of a migration."""


class ClusterDownError(ReplyError):
    """``CLUSTERDOWN``: the cluster cannot serve the slot right now."""


_BY_CODE: dict[str, type[ReplyError]] = {
    "WRONGPASS": AuthenticationError,
    "NOAUTH": AuthenticationError,
    "NOPERM": NoPermissionError,
    "READONLY": ReadOnlyError,
    "EXECABORT": ExecAbortError,
    "MOVED": MovedError,
    "ASK": AskError,
    "TRYAGAIN": TryAgainError,
    "CLUSTERDOWN": ClusterDownError,
}


def reply_error(message: str) -> ReplyError:
    """Build the typed error for one error reply line (the parser's error factory)."""
    cls = _BY_CODE.get(message.split(" ", 1)[0], ReplyError)
    try:
        return cls(message)
    except ValueError:  # a redirect whose text does not parse: keep it as a plain reply error
        return ReplyError(message)
