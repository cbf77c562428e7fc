"""The headers a recording adds to what it copies, and how a replay takes them off again.

- :data:`ID_HEADER` (``x-redis-id``): the Redis entry id of a recorded stream entry. Its time
  (the id's milliseconds) is also the message's timestamp in the file.
- :data:`FIELDS_HEADER` (``x-redis-fields``): on an entry written by a producer that does not
  use trio-streams' layout. ``json`` on an entry with no ``_payload`` whose fields are text, each
  named once: its payload in the file is the fields as a JSON object, as a handler reading it
  from Redis gets it. Otherwise the entry's exact fields (see :mod:`.fields`). Either way a
  replay sends the fields back as they were instead of a ``_payload``. A handler fed from the
  file does not see it (:data:`~trio_streams.file.envelope.STORAGE_HEADERS`): from Redis it
  would not either.
- :data:`CHANNEL_HEADER` (``x-redis-channel``): the channel a Pub/Sub message was published on
  (a pattern recording names many).
- :data:`LIST_HEADER` (``x-redis-list``): the list an element was recorded from.

A replay sends each message back as what it was recorded from (:func:`recorded_as`): a channel
message, a list element, or else a stream entry.

A replay leaves all of them out unless asked to keep them, so the entries it writes look like
the ones that were recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ..core.errors import TrioStreamsError

__all__ = [
    "CHANNEL_HEADER",
    "FIELDS_HEADER",
    "ID_HEADER",
    "LIST_HEADER",
    "RECORDING_HEADERS",
    "RecordingClash",
    "recorded_as",
    "without_recording_headers",
]

ID_HEADER = "x-redis-id"
#: Kept in the file, never handed to a file subscription's handler (it is a storage header).
FIELDS_HEADER = "x-redis-fields"
CHANNEL_HEADER = "x-redis-channel"
LIST_HEADER = "x-redis-list"
#: Every header a recording may add.
RECORDING_HEADERS = frozenset({ID_HEADER, FIELDS_HEADER, CHANNEL_HEADER, LIST_HEADER})


def recorded_as(headers: Mapping[str, str]) -> Literal["stream", "list", "channel"]:
    """What a recorded message was in Redis, from the headers its recording added: a channel
    message, a list element, or else a stream entry."""
    if CHANNEL_HEADER in headers:
        return "channel"
    if LIST_HEADER in headers:
        return "list"
    return "stream"


class RecordingClash(TrioStreamsError):
    """An entry already carries a header the recording would add, with another value: writing
    ours would lose the producer's (the message names the entry and the header)."""

    def __init__(self, message: str, *, header: str) -> None:
        super().__init__(message)
        #: The header that clashed.
        self.header = header

    def hint(self) -> str | None:
        if self.header in (FIELDS_HEADER, CHANNEL_HEADER):
            return None
        return "name the header that keeps entry ids otherwise with --id-header NAME"


def add_header(headers: dict[str, str], name: str, value: str, where: str) -> None:
    """Set ``headers[name] = value``, refusing to overwrite a different value the producer set."""
    old = headers.get(name)
    if old is not None and old != value:
        raise RecordingClash(
            f"{where} already carries the header {name!r} (= {old!r}); recording it would "
            f"replace that with {value!r}",
            header=name,
        )
    headers[name] = value


def without_recording_headers(headers: Mapping[str, str], names: frozenset[str]) -> dict[str, str]:
    """``headers`` without ``names`` (a replay's copy of a recorded entry's headers)."""
    return {k: v for k, v in headers.items() if k not in names}
