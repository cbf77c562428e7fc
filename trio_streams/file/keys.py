"""Which stream keys a file holds: to refuse a key named on the command line, or replayed by an
app, that it does not.

:func:`check_file_keys` first reads the file's beacons: each names, for some streams, the last
message written before it, so a key named there is in the file. That costs one small read per
beacon interval (1,024 reads for a 1 GiB file at the default 1 MiB), and nothing below 571
bytes, where beacons carry no marker. A key no beacon names (written after the last one, or
left out of a beacon whose markers rotate among more streams than it has room for) is looked
for in the messages, from the start, only until every key asked for has been seen: usually a
page or two. Only a key that is not there costs one pass over the file, after which nothing has
been handled, printed or sent yet. The check never refuses a key that has a message.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from ..core.errors import ConfigurationError
from ..core.names import check_names
from .format import INTERNAL_KEY, WILDCARD_KEY, key_is_valid, markers_per_beacon
from .reader import FileReader

__all__ = ["check_file_keys", "check_stream_key"]

#: Messages decoded per read while looking.
_BATCH = 8192


def check_file_keys(path: str | os.PathLike[str], keys: Collection[str] | None) -> None:
    """Raise :class:`~trio_streams.core.names.NameNotFound` if a key of ``keys`` has no message in
    the file at ``path``, listing the keys it holds, closest first. None or empty: any key."""
    keys = [key for key in keys or () if key != INTERNAL_KEY]  # always there, never listed
    if not keys:
        return
    wanted = set(keys)
    with FileReader(path) as reader:
        seen = _named_by_beacons(reader, wanted)
        while not wanted <= seen:
            batch = reader.read_messages(_BATCH)
            if not batch:
                if reader.at_eof or reader.eos is not None:
                    break
                continue
            seen.update(message.stream_key for message in batch)
    seen.discard(INTERNAL_KEY)
    check_names("stream key", keys, seen, os.fspath(path))


def _named_by_beacons(reader: FileReader, wanted: set[str]) -> set[str]:
    """The keys the file's beacons name, read until every key of ``wanted`` is among them."""
    seen: set[str] = set()
    interval = reader.beacon_interval
    if not markers_per_beacon(interval):
        return seen
    for index in range(1, reader.file_size() // interval + 1):
        beacon = reader.read_beacon(index)
        if beacon is None:
            break  # the last one, still being written
        seen.update(marker.stream_key for marker in beacon.markers)
        if wanted <= seen:
            break
    return seen


def check_stream_key(key: str) -> None:
    """Refuse, with ``ConfigurationError``, a key the format cannot hold or reserves.

    An empty key is refused too: the format would store it, but no subscription can name it.
    """
    if not key:
        raise ConfigurationError(
            "stream key '' is empty: a stream key is 1 to 249 characters of [A-Za-z0-9._-]"
        )
    if key in (INTERNAL_KEY, WILDCARD_KEY):
        raise ConfigurationError(f"stream key {key!r} is reserved by the stream-file format")
    if not key.isascii() or not key_is_valid(key.encode("ascii")):
        raise ConfigurationError(
            f"stream key {key!r} is not valid in a stream file: at most 249 characters of "
            "[A-Za-z0-9._-]"
        )
