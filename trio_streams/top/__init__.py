"""``trio-streams top``: what flows through a Redis deployment or a stream file, at a glance.

- :mod:`.redis_sample` takes one snapshot of a deployment's streams (``XINFO``, the delay
  ZSETs), read-only, so it shows streams any producer wrote;
- :mod:`.file_sample` reads a stream file on from where the last snapshot stopped;
- :mod:`.rates` turns two snapshots into rows (per second figures over the time between them);
- :mod:`.render` prints the rows as text (``--once``) or as a rich table (:mod:`.live`).
"""

from __future__ import annotations

from .file_sample import FileSampler, FileSnapshot, KeySample
from .rates import FileRow, GroupRow, StreamRow, file_rows, redis_rows
from .redis_sample import ConsumerSample, GroupSample, RedisSnapshot, StreamSample, sample_redis

__all__ = [
    "ConsumerSample",
    "FileRow",
    "FileSampler",
    "FileSnapshot",
    "GroupRow",
    "GroupSample",
    "KeySample",
    "RedisSnapshot",
    "StreamRow",
    "StreamSample",
    "file_rows",
    "redis_rows",
    "sample_redis",
]
