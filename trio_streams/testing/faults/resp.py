"""A pure, incremental counter of the commands a Redis client sends (the client→server bytes).

The fault proxy needs to know where each command ends in the byte stream (to cut a connection
right after its Nth command) and what it was (its name, and the name a ``CLIENT SETNAME`` or
``HELLO ... SETNAME`` gives the connection, for predicates). It never needs a command whole, so
the counter keeps at most :data:`KEPT_ARGUMENTS` arguments of :data:`KEPT_BYTES` bytes each and
skips the rest while counting: memory stays bounded whatever the client sends.

Both RESP forms a client may send are understood: arrays of bulk strings (``*2\\r\\n$3\\r\\nGET
...``, what every client library sends) and inline commands (``PING\\r\\n``). Bytes that are
neither make the counter raise :class:`RespError` (the proxy then stops counting that
connection and forwards its bytes as they come).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KEPT_ARGUMENTS", "KEPT_BYTES", "CommandCounter", "RespError", "SeenCommand"]

#: The arguments of a command kept (the name and the first ones, enough for ``CLIENT SETNAME
#: x`` and ``HELLO 3 SETNAME x``); later arguments are skipped while counting.
KEPT_ARGUMENTS = 5
#: The bytes of each kept argument kept; the rest of a longer argument is skipped.
KEPT_BYTES = 256
#: The longest header line (``*N`` or ``$N``) or inline command accepted.
MAX_LINE = 64 * 1024


class RespError(ValueError):
    """The client sent bytes that are not a RESP command; the message says what and where."""


@dataclass(frozen=True)
class SeenCommand:
    """One command the client sent: where it ended and its first arguments."""

    #: Offset, in the chunk given to :meth:`CommandCounter.feed`, just past the command's last
    #: byte.
    end: int
    #: The first arguments (at most :data:`KEPT_ARGUMENTS`, each cut at :data:`KEPT_BYTES`).
    arguments: tuple[bytes, ...]

    @property
    def name(self) -> str:
        """The command's name in upper case (``"XREADGROUP"``), ``""`` for an empty one."""
        return self.arguments[0].decode("ascii", "replace").upper() if self.arguments else ""

    @property
    def client_name(self) -> str | None:
        """The name this command gives the connection (``CLIENT SETNAME name`` or ``HELLO ...
        SETNAME name``), or None."""
        words = [a.decode("utf-8", "replace") for a in self.arguments]
        upper = [w.upper() for w in words]
        if upper[:2] == ["CLIENT", "SETNAME"] and len(words) > 2:
            return words[2]
        if upper[:1] == ["HELLO"] and "SETNAME" in upper:
            at = upper.index("SETNAME") + 1
            return words[at] if at < len(words) else None
        return None


class CommandCounter:
    """Feed it the client's bytes chunk by chunk; it returns the commands each chunk completed.

    Holds at most one header line and the kept prefix of a few arguments between chunks.
    """

    def __init__(self) -> None:
        self.count = 0
        self._line = bytearray()  # a header or inline line being read
        self._remaining_args = 0  # arguments still to read in the current array
        self._in_array = False
        self._bulk_left = -1  # bytes of the current bulk (and its CRLF) still to read; -1: none
        self._bulk = bytearray()
        self._bulk_length = 0
        self._args: list[bytes] = []

    def feed(self, data: bytes | bytearray | memoryview) -> list[SeenCommand]:
        """The commands completed by ``data`` (with their end offsets within it), in order.

        Raises :class:`RespError` on bytes that are not RESP; the counter is then unusable.
        """
        view = memoryview(data)
        seen: list[SeenCommand] = []
        at = 0
        size = len(view)
        while at < size:
            if self._bulk_left >= 0:
                take = min(self._bulk_left, size - at)
                room = KEPT_BYTES - len(self._bulk)
                if room > 0:
                    self._bulk += view[at : at + min(take, room)]
                self._bulk_left -= take
                at += take
                if self._bulk_left == 0:
                    self._bulk_left = -1
                    self._end_argument(bytes(self._bulk[: self._bulk_length]))
                    if self._done():
                        seen.append(self._complete(at))
                continue
            newline = bytes(view[at:]).find(b"\n")
            if newline < 0:
                self._line += view[at:]
                self._check_line_length()
                break
            self._line += view[at : at + newline + 1]
            at += newline + 1
            self._check_line_length()
            line = bytes(self._line).rstrip(b"\r\n")
            self._line.clear()
            command = self._on_line(line, at)
            if command is not None:
                seen.append(command)
        return seen

    def _check_line_length(self) -> None:
        if len(self._line) > MAX_LINE:
            raise RespError(
                f"command {self.count + 1}: a line of more than {MAX_LINE} bytes without an end"
            )

    def _on_line(self, line: bytes, end: int) -> SeenCommand | None:
        if self._in_array:
            if not line.startswith(b"$"):
                raise RespError(
                    f"command {self.count + 1}: expected a bulk string header, got {line[:20]!r}"
                )
            length = self._number(line[1:])
            if length < 0:  # a null bulk string: an empty argument
                self._end_argument(b"")
                return self._complete(end) if self._done() else None
            self._bulk.clear()
            self._bulk_length = length
            self._bulk_left = length + 2
            return None
        if line.startswith(b"*"):
            count = self._number(line[1:])
            if count <= 0:  # an empty (or null) array: a command that does nothing
                self._args = []
                return self._complete(end)
            self._in_array = True
            self._remaining_args = count
            self._args = []
            return None
        words = line.split()
        if not words:  # an empty inline line is skipped by Redis too
            return None
        self._args = [w[:KEPT_BYTES] for w in words[:KEPT_ARGUMENTS]]
        return self._complete(end)

    def _number(self, text: bytes) -> int:
        try:
            return int(text)
        except ValueError:
            raise RespError(f"command {self.count + 1}: bad length {text[:20]!r}") from None

    def _end_argument(self, value: bytes) -> None:
        if len(self._args) < KEPT_ARGUMENTS:
            self._args.append(value[:KEPT_BYTES])
        self._remaining_args -= 1

    def _done(self) -> bool:
        return self._remaining_args == 0

    def _complete(self, end: int) -> SeenCommand:
        self._in_array = False
        self.count += 1
        command = SeenCommand(end, tuple(self._args))
        self._args = []
        return command
