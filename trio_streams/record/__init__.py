"""Record a Redis stream, list or channel into a stream file, and replay a recording back.

``trio-streams record`` and ``trio-streams replay`` are thin shells over this package:

- :mod:`.bounds` reads ``--from`` / ``--until`` (an entry id or ``ts:MS``) into XRANGE bounds;
- :mod:`.recorder` copies entries into a :class:`~trio_streams.file.writer.StreamWriter` with
  plain ``XRANGE`` / ``XREAD`` (never a consumer group), ``LRANGE`` or ``SUBSCRIBE``;
- :mod:`.replayer` publishes a recording back with ``XADD`` (or ``RPUSH`` / ``PUBLISH``), paced
  by :mod:`.pacing` on Trio's clock;
- :mod:`.progress` shows how far a recording got (a bar on a terminal, plain lines elsewhere).

A recording keeps each entry's payload and headers (the file's ``rs1:`` / ``rs2:`` envelope),
its time as the message timestamp, and its id in the header :data:`ID_HEADER`, so an app that
mounts its handler on ``FileStream(key).replay()`` sees what it saw on Redis.
"""

from __future__ import annotations

from .bounds import BoundError, StreamBounds, parse_bounds
from .headers import (
    CHANNEL_HEADER,
    FIELDS_HEADER,
    ID_HEADER,
    LIST_HEADER,
    RECORDING_HEADERS,
    RecordingClash,
)
from .pacing import Pacing
from .recorder import RecordSummary, record_channel, record_list, record_stream
from .replayer import ReplaySummary, replay_file

__all__ = [
    "CHANNEL_HEADER",
    "FIELDS_HEADER",
    "ID_HEADER",
    "LIST_HEADER",
    "RECORDING_HEADERS",
    "BoundError",
    "Pacing",
    "RecordSummary",
    "RecordingClash",
    "ReplaySummary",
    "StreamBounds",
    "parse_bounds",
    "record_channel",
    "record_list",
    "record_stream",
    "replay_file",
]
