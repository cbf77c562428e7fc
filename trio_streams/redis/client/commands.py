"""What the client must know about a command before sending it, from its name alone.

A pooled connection serves one caller after another, so whatever a command leaves behind on the
connection (a database chosen with ``SELECT``, a ``MULTI`` still open, a ``WATCH``, subscribed
mode, replies switched off) would meet the next caller. Each command is therefore classified by
name before it is sent:

- refused: commands that change the connection's mode or identity for everyone after
  (``SUBSCRIBE``, ``SELECT``, ``HELLO``, ``MONITOR``, ``CLIENT REPLY``...). They raise
  :class:`~.errors.CommandNotAllowedError` naming the API to use instead; nothing is sent.
- session: ``MULTI``/``EXEC``/``DISCARD``/``WATCH``/``UNWATCH``, whose effect the connection
  tracks so that a lease left with a transaction open or keys watched is reset.
- blocking: ``BLPOP``, ``XREADGROUP ... BLOCK``..., whose own block time is added to the
  optional ``command_timeout``.

The hot path is one dict lookup per command: the kind of each distinct command name is cached,
so ``"SET"`` is upper-cased and classified once, not per command.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from .errors import CommandEncodingError, CommandNotAllowedError, describe_command

#: Kinds (bit flags); 0 is a plain command.
REFUSED: Final = 1
CLIENT: Final = 2  # refused for some subcommands only
MULTI: Final = 4
EXEC: Final = 8  # EXEC and DISCARD: end a transaction (and any WATCH)
WATCH: Final = 16
UNWATCH: Final = 32
BLOCKING: Final = 64

_SUBSCRIBE = "Pub/Sub puts the connection in subscribed mode: use client.subscribe(...)"
_REFUSED: dict[str, str] = {
    "SUBSCRIBE": _SUBSCRIBE,
    "PSUBSCRIBE": _SUBSCRIBE,
    "SSUBSCRIBE": _SUBSCRIBE,
    "UNSUBSCRIBE": _SUBSCRIBE + " and its unsubscribe methods",
    "PUNSUBSCRIBE": _SUBSCRIBE + " and its unsubscribe methods",
    "SUNSUBSCRIBE": _SUBSCRIBE + " and its unsubscribe methods",
    "MONITOR": "MONITOR turns the connection into a feed of every command; it is not supported",
    "RESET": "the client resets the connections it hands out itself",
    "HELLO": "the protocol is negotiated when a connection opens: set protocol= instead",
    "AUTH": "credentials are given when a connection opens: put them in the URL instead",
    "SELECT": "the database is chosen when a connection opens: use one client per database "
    "(the URL path or db=)",
    "QUIT": "QUIT closes the connection under the client: close the client (aclose) instead",
    "SYNC": "replication commands turn the connection into a replication stream",
    "PSYNC": "replication commands turn the connection into a replication stream",
    "REPLCONF": "replication commands turn the connection into a replication stream",
}
_CLIENT_REFUSED: dict[str, str] = {
    "REPLY": "CLIENT REPLY OFF/SKIP would desynchronise replies from commands: use a "
    "pipeline to save round trips",
    "TRACKING": "client-side caching (CLIENT TRACKING) is not supported",
}
_SESSION: dict[str, int] = {
    "MULTI": MULTI,
    "EXEC": EXEC,
    "DISCARD": EXEC,
    "WATCH": WATCH,
    "UNWATCH": UNWATCH,
}
_BLOCKING = frozenset(
    {
        "BLPOP",
        "BRPOP",
        "BRPOPLPUSH",
        "BLMOVE",
        "BZPOPMIN",
        "BZPOPMAX",
        "BLMPOP",
        "BZMPOP",
        "XREAD",
        "XREADGROUP",
        "WAIT",
        "WAITAOF",
    }
)

#: Kind by command name as sent (any type, any case), filled as names are seen. Hot loops
#: look names up here directly and fall back to :func:`kind_of` for a name not seen yet.
KINDS: dict[Any, int] = {}
#: Distinct names cached at most (a bound, not a tuning knob: real programs use a few dozen).
_CACHE_LIMIT = 4096


def _name(value: Any) -> str | None:
    """The upper-case command name, or None when the value cannot name a command."""
    if isinstance(value, str):
        return value.upper()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("latin-1").upper()
    return None


def _classify(value: Any) -> int:
    name = _name(value)
    if name is None:
        kind = 0
    elif name in _REFUSED:
        kind = REFUSED
    elif name == "CLIENT":
        kind = CLIENT
    elif name in _BLOCKING:
        kind = BLOCKING
    else:
        kind = _SESSION.get(name, 0)
    if len(KINDS) < _CACHE_LIMIT:
        try:
            KINDS[value] = kind
        except TypeError:  # an unhashable name (bytearray): classified again next time
            pass
    return kind


def empty_command_error() -> CommandEncodingError:
    return CommandEncodingError(
        "cannot send an empty command: a command needs at least its name "
        "(the server would ignore it and never answer)"
    )


def kind_of(args: Sequence[Any]) -> int:
    """The kind flags of a command (0 for a plain one); raises for an empty command."""
    try:
        return KINDS[args[0]]
    except KeyError:
        return _classify(args[0])
    except IndexError:
        raise empty_command_error() from None
    except TypeError:  # unhashable name
        return _classify(args[0])


def refusal(args: Sequence[Any], kind: int) -> CommandNotAllowedError | None:
    """The error refusing ``args`` (of ``kind``), or None when it may be sent."""
    if kind & REFUSED:
        name = _name(args[0]) or "?"
        return CommandNotAllowedError(
            f"{name} is not allowed on a client connection: {_REFUSED[name]}"
        )
    if kind & CLIENT and len(args) > 1:
        sub = _name(args[1])
        if sub in _CLIENT_REFUSED:
            return CommandNotAllowedError(
                f"CLIENT {sub} is not allowed on a client connection: {_CLIENT_REFUSED[sub]}"
            )
    return None


def check_command(args: Sequence[Any]) -> None:
    """Raise if ``args`` is empty or a refused command (for builders: refuse at the call)."""
    try:
        kind = KINDS[args[0]]
    except (KeyError, IndexError, TypeError):
        kind = kind_of(args)
    if kind & (REFUSED | CLIENT):
        error = refusal(args, kind)
        if error is not None:
            raise error


def block_seconds(args: Sequence[Any]) -> float | None:
    """How long a blocking command may wait on the server by its own arguments: its timeout
    (0 for a non-blocking ``XREAD``), or None when it may wait forever (a timeout of 0)."""
    name = _name(args[0])
    try:
        if name in ("BLMPOP", "BZMPOP"):
            seconds = float(args[1])
        elif name == "WAIT":
            seconds = float(args[2]) / 1000
        elif name == "WAITAOF":
            seconds = float(args[3]) / 1000
        elif name in ("XREAD", "XREADGROUP"):
            # Walk the options by arity, as the key finder does: GROUP takes two words (a group
            # or consumer may be named "streams" or "block"), COUNT and BLOCK one, NOACK none.
            seconds = 0.0
            index = 1
            while index < len(args):
                word = _name(args[index])
                if word == "STREAMS":
                    break
                if word == "GROUP":
                    index += 3
                elif word == "BLOCK":
                    seconds = float(args[index + 1]) / 1000
                    if seconds == 0:
                        return None
                    index += 2
                elif word in ("COUNT", "CLAIM"):
                    index += 2
                else:
                    index += 1
            return seconds
        else:
            seconds = float(args[-1])
    except (IndexError, TypeError, ValueError):
        return 0.0  # malformed: the server refuses it at once
    if seconds == 0 or not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def encoding_error(args: Sequence[Any], cause: BaseException) -> CommandEncodingError:
    """The error for a command the encoder refused, naming the bad argument's index and type."""
    for index, value in enumerate(args):
        if isinstance(value, bool) or not isinstance(value, (bytes, str, int, float, memoryview)):
            type_name = type(value).__name__
            advice = (
                "send 1/0 or a string for a flag"
                if isinstance(value, bool)
                else "arguments must be bytes, str, int or float"
            )
            error = CommandEncodingError(
                f"cannot send argument {index} (a {type_name}) of command "
                f"{describe_command(args)}: {advice}"
            )
            error.index = index
            return error
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                error = CommandEncodingError(
                    f"cannot send argument {index} (a str) of command {describe_command(args)}: "
                    f"it is not valid Unicode ({exc.reason} at position {exc.start}); "
                    "send bytes for binary data"
                )
                error.index = index
                return error
    return CommandEncodingError(f"cannot send command {describe_command(args)}: {cause}")
