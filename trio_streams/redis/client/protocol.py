"""The sans-io RESP core: pack commands into bytes, turn received bytes into replies.

Nothing here does I/O, so the connection layer stays a thin loop around ``send_all`` and
``receive_some`` (the h11-under-httpcore split), and the parser can be tested on any byte
split. hiredis does the byte work in C; this module fixes its conventions in one place:

- an error reply becomes a typed :class:`~.errors.ReplyError` *value* (never raised here), so a
  pipeline keeps each error in its place;
- RESP3 push frames (``>``) come back as :class:`PushFrame` (a list), telling them apart from
  replies;
- "not enough data yet" is a private sentinel, never ``False``, because RESP3 ``#f`` is a
  legitimate ``False`` reply;
- RESP3 attribute frames (``|``: auxiliary data sent *before* a reply, or before an element of
  an aggregate) are dropped. hiredis returns an attribute as if it were a reply of its own (a
  flat list), which would shift every later reply by one, so the parser removes them from the
  byte stream before hiredis sees it (see :class:`ReplyParser`).

hiredis is the ``redis`` extra. Without it this module still imports (so does everything
that imports it: a stream-file app and the command line never parse RESP), and packing a
command or making a parser raises :class:`~trio_streams.core.extras.MissingExtra`; ``connect``
and ``RedisBroker`` refuse the same way, before anything starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from ...core.extras import MissingExtra, optional
from .commands import encoding_error
from .errors import RedisProtocolError, reply_error

#: hiredis, or None on an install without the ``redis`` extra.
_hiredis: Any = optional("redis")


class _NoPushFrame(list[Any]):
    """Stands in for hiredis's push frame type without hiredis, where no reply is parsed."""

    __slots__ = ()


#: A RESP3 push frame (Pub/Sub message, invalidation...): a list of its elements.
PushFrame: Final[type[list[Any]]] = _NoPushFrame if _hiredis is None else _hiredis.PushNotification

#: What a missing hiredis refuses.
REDIS_CLIENT: Final = "the Redis client (trio_streams.redis)"


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
    if _hiredis is None:
        raise MissingExtra("redis", REDIS_CLIENT)
    try:
        return _hiredis.pack_command(tuple(args))  # type: ignore[no-any-return]
    except (TypeError, UnicodeEncodeError) as exc:
        raise encoding_error(args, exc) from exc


def pack_commands(commands: Iterable[Command]) -> bytes:
    """Several commands as one buffer, so a pipeline leaves in one write."""
    return b"".join([pack_command(c) for c in commands])


class ReplyParser:
    """Incremental RESP2/RESP3 reply parser: feed bytes, take complete replies one by one.

    Replies are parsed by hiredis. Attribute frames are not replies, so they must not reach it:
    a received chunk in which an attribute could start (a ``|`` as the first byte, or right
    after a line end) is walked by :class:`_AttributeFilter` from the last frame boundary,
    which passes on every byte except the attribute frames; once the walk reaches a boundary
    with no ``|`` ahead, chunks go straight to hiredis again. Any other chunk, the common case,
    costs one byte search.

    The walk needs to start at a frame boundary, and hiredis does not say where one is. So the
    parser keeps the chunks fed since the last boundary it knows of; :meth:`settled` (called by
    the connection when it took the last reply it waited for) tells it that the stream is at a
    boundary again when nothing is left over. A new parser starts at a boundary.
    """

    __slots__ = (
        "_boundary",
        "_filter",
        "_queue",
        "_reader",
        "_retained",
        "_retained_size",
        "next_reply",
    )

    def __init__(self) -> None:
        self._reader = _new_reader()
        #: The next complete reply, or :data:`NEED_DATA` (hiredis' own method while nothing
        #: is queued, so the common path is one C call). Raises
        #: :class:`~.errors.RedisProtocolError` on bytes that are not RESP; the parser is
        #: unusable afterwards and so is its connection.
        self.next_reply: Callable[[], Any] = self._reader.gets
        #: True while ``_retained`` holds every byte fed since a known frame boundary.
        self._boundary = True
        self._retained: list[bytes] = []
        self._retained_size = 0
        self._filter: _AttributeFilter | None = None
        #: Replies taken out of a replaced hiredis reader, not yet handed out.
        self._queue: deque[Any] = deque()

    def feed(self, data: bytes | bytearray) -> None:
        """Append received bytes.

        Raises :class:`~.errors.RedisProtocolError` if the bytes walked for attribute frames
        are not RESP (the parser is unusable afterwards).
        """
        if self._filter is not None:
            self._feed_filtered(bytes(data))
            return
        if self._boundary and _next_bar(data, 0) != -1:
            self._start_filter(bytes(data))
            return
        # Without a known boundary (more than _RETAIN_LIMIT bytes since one) a "|" is taken
        # for data: an attribute frame there would reach hiredis as a reply.
        self._reader.feed(data)
        if self._boundary:
            self._retained_size += len(data)
            if self._retained_size > _RETAIN_LIMIT:
                self._forget_boundary()
            else:
                self._retained.append(bytes(data))

    def settled(self) -> None:
        """The caller took a reply: if no byte is left over, the stream is at a frame boundary,
        so the bytes kept since the previous one can go."""
        if self._filter is None and not self._queue and not self._reader.has_data():
            self._boundary = True
            self._retained.clear()
            self._retained_size = 0

    def has_buffered_data(self) -> bool:
        """True when bytes are buffered that no reply has consumed yet."""
        if self._queue or self._reader.has_data():
            return True
        return self._filter is not None and self._filter.has_data()

    # -- attribute frames -------------------------------------------------------------------

    def _forget_boundary(self) -> None:
        self._boundary = False
        self._retained.clear()
        self._retained_size = 0

    def _start_filter(self, data: bytes) -> None:
        """Walk from the last boundary: re-parse the frame hiredis holds half of, then ``data``."""
        walker = _AttributeFilter()
        if self._retained:
            # Replies hiredis completed are handed out first; the frame it holds half of is
            # parsed again by a new reader, from bytes with any attribute removed.
            while (reply := self._reader.gets()) is not NEED_DATA:
                self._queue.append(reply)
            self._reader = _new_reader()
            walker.discarding = True  # complete frames were parsed already
            pieces, _ = walker.process(b"".join(self._retained))
            walker.discarding = False
            for piece in pieces:
                self._reader.feed(piece)
        self._filter = walker
        self._retained.clear()
        self._retained_size = 0
        self.next_reply = self._next_queued if self._queue else self._reader.gets
        self._feed_filtered(data)

    def _feed_filtered(self, data: bytes) -> None:
        assert self._filter is not None
        pieces, rest = self._filter.process(data)
        for piece in pieces:
            self._reader.feed(piece)
        if rest is not None:  # at a boundary with no attribute ahead: back to the direct path
            self._filter = None
            self._boundary = True
            self._retained = [rest] if rest else []
            self._retained_size = len(rest)

    def _next_queued(self) -> Any:
        if self._queue:
            return self._queue.popleft()
        self.next_reply = self._reader.gets
        return self._reader.gets()


#: Bytes kept to find the last frame boundary again; past this the parser stops looking for
#: attribute frames until the connection settles at a boundary. The connection settles at every
#: reply, so what is kept is the frame still arriving: this bound is the server's own largest
#: bulk string (``proto-max-bulk-len``, 512 MiB by default), never reached by a sane reply.
_RETAIN_LIMIT: Final = 512 * 1024 * 1024


def _new_reader() -> Any:
    if _hiredis is None:
        raise MissingExtra("redis", REDIS_CLIENT)
    return _hiredis.Reader(
        replyError=reply_error, protocolError=RedisProtocolError, notEnoughData=NEED_DATA
    )


_SCALARS: Final = frozenset(b"+-:_,#(")
_BLOBS: Final = frozenset(b"$=!")
_AGGREGATES: Final = frozenset(b"*~>")
_ATTRIBUTE: Final = ord("|")
_PAIRED: Final = frozenset(b"%|")


def _next_bar(buffer: bytes | bytearray, position: int) -> int:
    """Where an attribute frame may start at or after ``position`` (a frame boundary): the
    first ``|`` there or right after a line end; -1 if none.

    The byte is searched for alone (memchr: many times faster than a two-byte search),
    then checked for the line end before it.
    """
    found = buffer.find(b"|", position)
    while found != -1:
        if found == position or buffer[found - 1] == 0x0A:
            return found
        found = buffer.find(b"|", found + 1)
    return -1


class _AttributeFilter:
    """Walks RESP frames from a frame boundary and passes on every byte but attribute frames.

    It follows the structure only (type bytes, lengths, element counts; a blob's body is
    skipped by its length, never searched), so a ``|`` inside a bulk string stays data. An
    attribute frame, with everything nested in it, is cut out; it does not count as an
    element of the aggregate it sits in.
    """

    __slots__ = ("_attributes", "_blob", "_buffer", "_open", "discarding")

    def __init__(self) -> None:
        self._buffer = bytearray()
        #: Values still to come in each open aggregate, innermost last.
        self._open: list[int] = []
        #: Depths in ``_open`` at which an attribute frame opened (its bytes are cut out).
        self._attributes: list[int] = []
        #: Bytes of the current blob's body (and its line end) still to pass.
        self._blob = 0
        #: While True, the bytes of every completed top-level frame are dropped too (they were
        #: parsed before); the bytes of an unfinished frame are passed on.
        self.discarding = False

    def has_data(self) -> bool:
        """True when it is inside a frame or holds bytes of an unfinished line."""
        return bool(self._buffer or self._open or self._blob)

    def process(self, data: bytes) -> tuple[list[bytes], bytes | None]:
        """The bytes to parse, as pieces, and whether the walk can stop.

        The second value is None while the walk goes on; once it stopped at a frame boundary
        with no attribute frame possible in what is left, it is that remainder (included in
        the pieces), and the filter is done.
        """
        buffer = self._buffer
        buffer += data
        size = len(buffer)
        pieces: list[bytes] = []
        position = start = 0  # pass on buffer[start:position] unless inside an attribute
        bar = _next_bar(buffer, 0)
        if bar == -1 and not self._open and not self._blob and not self.discarding:
            return self._finish(pieces, 0)
        while position < size:
            if self._blob:
                taken = min(self._blob, size - position)
                position += taken
                self._blob -= taken
                if self._blob:
                    break
            else:
                end = buffer.find(b"\r\n", position)
                if end == -1:
                    break
                position, start, ended = self._header(buffer, position, end, pieces, start)
                if not ended:
                    continue
            # A value ended at `position`.
            cutting = bool(self._attributes)
            top_level = self._value_done()
            if cutting and not self._attributes:
                start = position  # the attribute frame ended: pass bytes on from here
            if top_level:
                if self.discarding:
                    pieces.clear()
                    start = position
                    continue
                if bar != -1 and bar < position:
                    bar = _next_bar(buffer, position)
                if bar == -1:
                    if start < position:
                        pieces.append(bytes(buffer[start:position]))
                    return self._finish(pieces, position)
        if not self._attributes and start < position:
            pieces.append(bytes(buffer[start:position]))
        del buffer[:position]
        return pieces, None

    def _header(
        self, buffer: bytearray, position: int, end: int, pieces: list[bytes], start: int
    ) -> tuple[int, int, bool]:
        """Take the header line at ``position`` (its line end at ``end``): a scalar, or the head
        of a blob or an aggregate, which opens it. Returns the position after the line, where
        bytes are passed on from (``start``, moved past an attribute frame's cut), and whether
        a value ended with the line."""
        kind = buffer[position]
        line_end = end + 2
        if kind in _SCALARS:
            return line_end, start, True
        if kind in _BLOBS:
            length = self._length(buffer, position, end)
            if length < 0:
                return line_end, start, True  # a null
            self._blob = length + 2
            return line_end, start, False
        if kind not in _AGGREGATES and kind not in _PAIRED:
            raise RedisProtocolError(f"unexpected RESP type byte {bytes([kind])!r} in a reply")
        count = self._length(buffer, position, end)
        if kind in _PAIRED:
            count *= 2
        if kind == _ATTRIBUTE:
            if not self._attributes and start < position:
                pieces.append(bytes(buffer[start:position]))
            if count > 0:
                self._open.append(count)
                self._attributes.append(len(self._open) - 1)
            elif not self._attributes:
                start = line_end  # an empty attribute: cut out its header alone
            return line_end, start, False
        if count > 0:
            self._open.append(count)
            return line_end, start, False
        return line_end, start, True

    def _finish(self, pieces: list[bytes], position: int) -> tuple[list[bytes], bytes]:
        rest = bytes(self._buffer[position:])
        self._buffer.clear()
        if rest:
            pieces.append(rest)
        return pieces, rest

    def _value_done(self) -> bool:
        """Count one finished value; True when it finished a top-level frame (an attribute
        frame counts as nothing, neither in its aggregate nor at the top level)."""
        open_ = self._open
        while open_:
            open_[-1] -= 1
            if open_[-1] > 0:
                return False
            open_.pop()
            if self._attributes and self._attributes[-1] == len(open_):
                self._attributes.pop()
                return False
        return True

    @staticmethod
    def _length(buffer: bytearray, position: int, end: int) -> int:
        try:
            return int(buffer[position + 1 : end])
        except ValueError:
            raise RedisProtocolError(
                f"bad length {bytes(buffer[position:end])!r} in a reply"
            ) from None
