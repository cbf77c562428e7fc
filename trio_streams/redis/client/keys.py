"""Which arguments of a command are keys, and which cluster slot a key hashes to.

The key positions come from the server's own ``COMMAND`` table (first key, last key, step),
loaded once per cluster client, so new commands need no code here. Commands whose keys move
with their arguments (EVAL's numkeys, XREADGROUP's STREAMS...) are handled by rule; any other
such command is asked of the server with ``COMMAND GETKEYS``.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CommandEncodingError
from .protocol import Arg, Command

SLOTS = 16384


def _key_bytes(key: Arg) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        try:
            return key.encode()
        except UnicodeEncodeError:
            raise CommandEncodingError(
                f"a key is not valid Unicode (a lone surrogate?): {key!r}"
            ) from None
    if isinstance(key, memoryview):
        return key.tobytes()
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return str(key).encode()
    raise CommandEncodingError(f"a key must be bytes, str, int or float, not {type(key).__name__}")


def key_slot(key: Arg) -> int:
    """The cluster slot of ``key``: CRC16 of its hash tag (``{...}``) or of the whole key."""
    data = _key_bytes(key)
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


@dataclass(frozen=True, slots=True)
class KeySpec:
    """Key positions of one command, as the server's COMMAND table gives them."""

    first: int
    last: int
    step: int
    movable: bool


def text(value: Any) -> str:
    """A reply value (bytes or other) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _flags(value: Any) -> set[str]:
    return {text(v) for v in value} if isinstance(value, (list, set, tuple)) else set()


def parse_command_table(reply: Sequence[Any]) -> dict[str, KeySpec]:
    """``name -> KeySpec`` from a ``COMMAND`` reply; subcommands as ``container|sub``."""
    table: dict[str, KeySpec] = {}

    def add(entry: Sequence[Any]) -> None:
        name = text(entry[0]).lower()
        flags = _flags(entry[2])
        table[name] = KeySpec(int(entry[3]), int(entry[4]), int(entry[5]), "movablekeys" in flags)
        if len(entry) > 9 and entry[9]:
            for sub in entry[9]:
                add(sub)

    for entry in reply:
        add(entry)
    return table


def _numkeys(args: Command, at: int) -> list[Arg] | None:
    """The ``numkeys`` keys that follow ``args[at]``; None when that is not a count (the
    server then says what is wrong)."""
    try:
        count = int(_key_bytes(args[at]))
    except (IndexError, ValueError):
        return None
    if count < 0 or at + 1 + count > len(args):
        return None
    return list(args[at + 1 : at + 1 + count])


#: XREAD/XREADGROUP options before ``STREAMS``, and how many arguments each takes.
_STREAM_READ_OPTIONS = {b"COUNT": 1, b"BLOCK": 1, b"NOACK": 0}


def _stream_read_keys(args: Command, first_option: int) -> list[Arg] | None:
    """The stream keys of XREAD / XREADGROUP: half of what follows the ``STREAMS`` keyword.

    The options before it are walked by their arity, so a group, consumer or count that
    happens to be spelt ``streams`` is never taken for the keyword.
    """
    index = first_option
    while index < len(args):
        word = _key_bytes(args[index]).upper()
        if word == b"STREAMS":
            rest = args[index + 1 :]
            if not rest or len(rest) % 2:
                return None  # malformed: let the server refuse it
            return list(rest[: len(rest) // 2])
        arity = _STREAM_READ_OPTIONS.get(word)
        if arity is None:
            return None  # an option this module does not know: ask the server
        index += 1 + arity
    return None


def _movable_keys(name: str, args: Command) -> list[Arg] | None:
    """Keys of the common movable-key commands, or None if this module has no rule."""
    if name in {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}:
        return _numkeys(args, 2)
    if name == "xread":
        return _stream_read_keys(args, 1)
    if name == "xreadgroup":
        # XREADGROUP GROUP group consumer [options] STREAMS key... id...
        if len(args) < 4 or _key_bytes(args[1]).upper() != b"GROUP":
            return None
        return _stream_read_keys(args, 4)
    if name in {"zunionstore", "zinterstore", "zdiffstore"}:
        keys = _numkeys(args, 2)
        return None if keys is None else [args[1], *keys]
    if name in {"zunion", "zinter", "zdiff", "sintercard", "zintercard", "lmpop", "zmpop"}:
        return _numkeys(args, 1)
    if name in {"blmpop", "bzmpop"}:
        return _numkeys(args, 2)
    return None


class KeyFinder:
    """Finds the keys of a command from the server's command table."""

    def __init__(self, table: dict[str, KeySpec]) -> None:
        self._table = table

    def keys(self, args: Command) -> list[Arg] | None:
        """The key arguments, or None when only the server can tell (``COMMAND GETKEYS``)."""
        name = text(args[0]).lower()
        spec = self._table.get(name)
        if spec is None:
            return []  # unknown here: treated as keyless; the server answers with an error
        if spec.first == 0 and len(args) > 1:
            sub = self._table.get(f"{name}|{text(args[1]).lower()}")
            if sub is not None:
                spec = sub
        if spec.movable:
            return _movable_keys(name, args)
        if spec.first <= 0:
            return []
        last = spec.last if spec.last >= 0 else len(args) + spec.last
        return list(args[spec.first : last + 1 : spec.step or 1])
