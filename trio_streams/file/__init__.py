"""SeaStreamer stream files (``.ss``): a byte-compatible codec, reader, writer and Trio follower.

The pieces, from the bottom up: :mod:`.format` (pure codec and CRC), :mod:`.decoder` and
:mod:`.encoder` (sans-io cores), :mod:`.survey` (beacon search), :mod:`.reader` (synchronous
reads, rewinds and seeks over one open file), :mod:`.watch` (one inotify watch per file per
process), :mod:`.follower` (the Trio source), :mod:`.writer` (appends, any number of writers,
serialized by :mod:`.lock`, kept exact by :mod:`.catchup` and synced as :mod:`.durability`
says) and :mod:`.publisher` (publishing from a script). Consumer groups (:mod:`.group`) keep
their state beside the file (:mod:`.group_state`, :mod:`.group_store`); :mod:`.groups` lists,
moves, resets and deletes them from outside.

The names below are imported from their modules the first time one is used, as the package
``trio_streams`` does: ``trio-streams file decode`` imports the reader, not the broker.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    from .broker import FileBroker
    from .durability import Durability, DurabilitySettingError
    from .durable import DurableLockedError, DurableStateError
    from .envelope import EnvelopeError
    from .errors import (
        BeaconError,
        ChecksumError,
        FileRemovedError,
        FrameEndError,
        SeekError,
        SeekOutOfRangeError,
        SequenceError,
        StreamFileError,
        StreamFileNotFoundError,
        StreamFormatError,
        StreamKeyNotFoundError,
        TruncatedError,
        UnprovenTailError,
        WriterClosedError,
        WriterLockedError,
    )
    from .follower import FileSource
    from .format import Header, Message
    from .group_store import GroupLockedError, GroupStateError, UntrustedFilesystemError
    from .groups import (
        FileGroupNotFound,
        GroupInfo,
        GroupReset,
        MemberInfo,
        delete_group,
        list_groups,
        move_group,
        reset_group,
    )
    from .positions import FilePosition
    from .publisher import FilePublisher, open_publisher
    from .reader import FileReader
    from .sources import FileStream
    from .writer import Receipt, StreamWriter

__all__ = [
    "BeaconError",
    "ChecksumError",
    "Durability",
    "DurabilitySettingError",
    "DurableLockedError",
    "DurableStateError",
    "EnvelopeError",
    "FileBroker",
    "FileGroupNotFound",
    "FilePosition",
    "FilePublisher",
    "FileReader",
    "FileRemovedError",
    "FileSource",
    "FileStream",
    "FrameEndError",
    "GroupInfo",
    "GroupLockedError",
    "GroupReset",
    "GroupStateError",
    "Header",
    "MemberInfo",
    "Message",
    "Receipt",
    "SeekError",
    "SeekOutOfRangeError",
    "SequenceError",
    "StreamFileError",
    "StreamFileNotFoundError",
    "StreamFormatError",
    "StreamKeyNotFoundError",
    "StreamWriter",
    "TruncatedError",
    "UnprovenTailError",
    "UntrustedFilesystemError",
    "WriterClosedError",
    "WriterLockedError",
    "delete_group",
    "list_groups",
    "move_group",
    "open_publisher",
    "reset_group",
]

#: Where each public name lives, for the lazy import below.
_EXPORTS: dict[str, str] = {
    "FileBroker": ".broker",
    "Durability": ".durability",
    "DurabilitySettingError": ".durability",
    "DurableLockedError": ".durable",
    "DurableStateError": ".durable",
    "EnvelopeError": ".envelope",
    "BeaconError": ".errors",
    "ChecksumError": ".errors",
    "FileRemovedError": ".errors",
    "FrameEndError": ".errors",
    "SeekError": ".errors",
    "SeekOutOfRangeError": ".errors",
    "SequenceError": ".errors",
    "StreamFileError": ".errors",
    "StreamFileNotFoundError": ".errors",
    "StreamFormatError": ".errors",
    "StreamKeyNotFoundError": ".errors",
    "TruncatedError": ".errors",
    "UnprovenTailError": ".errors",
    "WriterClosedError": ".errors",
    "WriterLockedError": ".errors",
    "FileSource": ".follower",
    "Header": ".format",
    "Message": ".format",
    "GroupLockedError": ".group_store",
    "GroupStateError": ".group_store",
    "UntrustedFilesystemError": ".group_store",
    "FileGroupNotFound": ".groups",
    "GroupInfo": ".groups",
    "GroupReset": ".groups",
    "MemberInfo": ".groups",
    "delete_group": ".groups",
    "list_groups": ".groups",
    "move_group": ".groups",
    "reset_group": ".groups",
    "FilePosition": ".positions",
    "FilePublisher": ".publisher",
    "open_publisher": ".publisher",
    "FileReader": ".reader",
    "FileStream": ".sources",
    "Receipt": ".writer",
    "StreamWriter": ".writer",
}

if not TYPE_CHECKING:  # type checkers see the imports above

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module, __name__), name)
        globals()[name] = value  # imported once: later uses are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS})
