"""The sans-io RESP core: pack commands into bytes, turn received bytes into replies.

Nothing here does I/O, so the connection layer stays a thin loop around ``send_all`` and
``receive_some`` (the h11-under-httpcore split), and the parser can be tested on any byte
split. hiredis does the byte work in C; this module fixes its conventions in one place:

- an error reply becomes a typed :class:`~.errors.ReplyError` *value* (never raised here), so a
  pipeline keeps each error in its place;
- RESP3 push frames (``>``) come back as :class:`PushFrame` (a list), telling them apart from
  replies;
- "not enough data yet" is a private sentinel, never ``False``, because RESP3 ``#f`` is a
  legitimate ``False`` reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import hiredis

from .commands import encoding_error
from .errors import RedisProtocolError, reply_error

#: A RESP3 push frame (Pub/Sub message, invalidation...): a list of its elements.
PushFrame: Final = hiredis.PushNotification


class _NeedData:
    """The type of :data:`NEED_DATA`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by :meth:`ReplyParser.next_reply` when the buffer holds no complete reply yet.
NEED_DATA: Final = _NeedData()

#: A command's arguments as the wire takes them.
Arg = bytes | str | int | float | memoryview
Command = Sequence[Arg]


def pack_command(args: Command) -> bytes:
    """One command as a RESP array of bulk strings."""
    try:
        return hiredis.pack_command(tuple(args))  # type: ignore[no-any-return,arg-type]
    except (TypeError, UnicodeEncodeError) as exc:
        raise encoding_error(args, exc) from exc


def pack_commands(commands: Iterable[Command]) -> bytes:
    """Several commands as one buffer, so a pipeline leaves in one write."""
    return b"".join([pack_command(c) for c in commands])


class ReplyParser:
    """Incremental RESP2/RESP3 reply parser: feed bytes, take complete replies one by one."""

    __slots__ = ("_reader",)

    def __init__(self) -> None:
        self._reader = hiredis.Reader(
            replyError=reply_error, protocolError=RedisProtocolError, notEnoughData=NEED_DATA
        )

    def feed(self, data: bytes | bytearray) -> None:
        """Append received bytes."""
        self._reader.feed(data)  # type: ignore[arg-type]

    def next_reply(self) -> Any:
        """The next complete reply, or :data:`NEED_DATA`.

        Raises :class:`~.errors.RedisProtocolError` on bytes that are not RESP; the parser is
        unusable afterwards and so is its connection.
        """
        return self._reader.gets()

    def has_buffered_data(self) -> bool:
        """True when bytes are buffered that no reply has consumed yet."""
        return bool(self._reader.has_data())
