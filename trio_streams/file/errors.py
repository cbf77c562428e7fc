"""Errors of the stream-file transport, each naming the file and, where it applies, the byte offset.

Corruption gets its own class per cause so callers (and tests) can tell a checksum failure from a
file cut short; all of them derive from :class:`StreamFormatError`.
"""

from __future__ import annotations

from typing import ClassVar

from ..core.errors import TrioStreamsError
from ..core.names import NameNotFound


class StreamFileError(TrioStreamsError):
    """Base of every stream-file error; carries the file and the byte offset it concerns."""

    #: What to do, shown after the message when the error stops an app or a command
    #: (``{path}`` is the file); None when there is nothing general to say.
    advice: ClassVar[str | None] = None

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        self.path = path
        self.offset = offset
        self.reason = message
        where = path if path is not None else "<stream>"
        if offset is not None:
            where = f"{where} at byte {offset}"
        super().__init__(f"{where}: {message}")

    def hint(self) -> str | None:
        if self.advice is None:
            return None
        return self.advice.format(path=self.path if self.path is not None else "FILE")


class StreamFormatError(StreamFileError, ValueError):
    """The bytes are not a valid SeaStreamer stream file."""


class BadMagicError(StreamFormatError):
    """The file does not start with the ``Ss`` byte mark."""


class UnsupportedVersionError(StreamFormatError):
    """The header names a format version other than 1."""


class BeaconIntervalError(StreamFormatError):
    """The header's beacon interval is below the minimum of 128 bytes."""


class FileNameError(StreamFormatError):
    """The header's file name is not valid UTF-8, or too long to write."""


class InvalidStreamKeyError(StreamFormatError):
    """A stream key is longer than 249 bytes or has a character outside ``[A-Za-z0-9._-]``."""


class TimestampRangeError(StreamFormatError):
    """A timestamp lies after the year 9999, which the Rust reader rejects."""


class ChecksumError(StreamFormatError):
    """A frame's payload does not match its CRC16/CDMA2000 checksum."""

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"

    def __init__(
        self, *, received: int, computed: int, path: str | None = None, offset: int | None = None
    ):
        self.received = received
        self.computed = computed
        super().__init__(
            f"payload checksum mismatch: frame says {received:#06x}, payload gives {computed:#06x}",
            path=path,
            offset=offset,
        )


class SequenceError(StreamFormatError):
    """A message's sequence number does not follow the one before it in its stream (key and
    shard): every writer numbers a stream's messages one by one, so a gap, a repeat or a step
    back means a damaged sequence number, shard or stream key, or a lost frame."""

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"


class FrameEndError(StreamFormatError):
    """A frame does not end with the byte ``0x0D`` every writer ends a frame with: its size
    field (or its key length) is damaged, so where it ends, and where the next frame starts,
    cannot be trusted."""

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"


class BeaconError(StreamFormatError):
    """A beacon disagrees with the frames around it: it does not start and end with ``0x0D``,
    it counts a different number of bytes left of the frame it splits, or a marker names a
    stream or sequence number the frames before it do not have."""

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"


class TruncatedError(StreamFormatError):
    """A finished file ends in the middle of a header, frame or beacon."""

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"


class UnprovenTailError(StreamFormatError):
    """The end of a file does not decode, and is not provably a write cut short by a crash.

    A writer reopening the file refuses to truncate such a tail (it may hold messages behind a
    damaged length field) and leaves the file unchanged; ``offset`` is where the undecodable
    bytes start and :attr:`why` says what keeps them from being a cut. ``trio-streams file
    repair`` moves them to a side file.
    """

    advice = "`trio-streams file repair {path}` moves the unreadable part aside"

    def __init__(
        self, message: str, *, why: str = "", path: str | None = None, offset: int | None = None
    ):
        self.why = why
        super().__init__(message, path=path, offset=offset)


class FileRemovedError(StreamFileError):
    """The file was removed from disk while it was being followed or written."""


class WriterLockedError(StreamFileError):
    """Something that needs the file to itself (``trio-streams file write``, ``file repair``,
    ``StreamWriter(exclusive=True)``) could not get its lock: writers' appends, or another such
    tool, held it longer than the wait. Ordinary writers never raise it: they take turns."""

    advice = (
        "is a `trio-streams file write` or `file repair` (or another exclusive writer) running "
        "on this file? Let it finish, or stop it"
    )


class WriterClosedError(StreamFileError):
    """The writer was used after it was closed."""


class SeekError(StreamFileError):
    """A seek could not be carried out; the reader is back where it was."""


class SeekOutOfRangeError(SeekError):
    """The seek target lies past the end of the file; the reader is back where it was."""


class StreamFileNotFoundError(StreamFileError, FileNotFoundError):
    """The stream file does not exist (or cannot be opened): a mistyped path, most often.

    Also a :class:`FileNotFoundError`, so code that handles a missing file the standard way
    handles this one; :attr:`filename` is the path, as for any ``OSError``."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        super().__init__(message, path=path, offset=offset)
        self.filename = path

    def __str__(self) -> str:
        # The message naming the path, not OSError's "[Errno None] None: path".
        return str(self.args[0])


class StreamKeyNotFoundError(NameNotFound):
    """A replay names a stream key the file holds no message of (and the app never publishes
    to): it would end at once having handled nothing. Lists the keys that are there."""

    def __init__(self, message: str, *, path: str, missing: tuple[str, ...]) -> None:
        super().__init__(message, missing=missing)
        self.path = path
