"""Where a recording into a file that already holds the stream's key goes on from.

A second ``trio-streams record`` of the same stream into the same file would copy the same
entries again, and a replay would then send them twice. So, like a durable recorder, it reads
what the file's key already holds: the entries recorded from Redis (each with its id in
:data:`~.headers.ID_HEADER`) and any message written otherwise (an app's own messages). The
recording resumes after the last recorded id, and a key holding messages that were not recorded
is refused unless appending to it is asked for.

The file is read once, from its start, before anything is written (no await: nothing to
cancel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import final

from ..core.errors import TrioStreamsError
from ..core.positions import MAX_SEQUENCE
from ..file.envelope import open_envelope
from ..file.reader import FileReader
from ..redis.wire import split_id

__all__ = ["KeyNotRecorded", "RecordedKey", "id_after", "recorded_key"]

_BATCH = 1000


class KeyNotRecorded(TrioStreamsError):
    """The file's key holds messages that were not recorded from Redis (the message names the
    key and the file): recording into it would mix the two."""

    def hint(self) -> str | None:
        return "add --append to record after them anyway, or name another key with --key NAME"


@final
@dataclass
class RecordedKey:
    """What a stream file's key holds already."""

    #: Messages of the key.
    messages: int = 0
    #: Messages without the id header: not recorded from a Redis stream.
    not_recorded: int = 0
    #: The greatest entry id recorded (None: none).
    last_id: str | None = None


def recorded_key(path: str, key: str, id_header: str) -> RecordedKey:
    """What ``key`` of the stream file at ``path`` holds (nothing if there is no file)."""
    found = RecordedKey()
    if not os.path.exists(path):
        return found
    with FileReader(path, keys=[key]) as reader:
        while True:
            batch = reader.read_messages(_BATCH)
            if not batch:
                if reader.at_eof or reader.eos is not None:
                    return found
                continue
            for message in batch:
                found.messages += 1
                entry_id = _recorded_id(message.payload, id_header)
                if entry_id is None:
                    found.not_recorded += 1
                elif found.last_id is None or split_id(entry_id) > split_id(found.last_id):
                    found.last_id = entry_id


def _recorded_id(payload: bytes, id_header: str) -> str | None:
    _, headers = open_envelope(payload)
    entry_id = headers.get(id_header)
    if entry_id is None:
        return None
    try:
        split_id(entry_id)
    except ValueError:
        return None
    return entry_id


def id_after(entry_id: str) -> str:
    """The least id after ``entry_id`` (an inclusive ``XRANGE`` start)."""
    ms, seq = split_id(entry_id)
    return f"{ms}-{seq + 1}" if seq < MAX_SEQUENCE else f"{ms + 1}-0"
