"""Redis Streams: ``RedisBroker`` and ``RedisStream`` (consumer groups, the pipeline window),
over the Trio-native connection layer in :mod:`trio_streams.redis.client`."""

from .broker import RedisBroker, RedisTransport
from .group import GroupVanished
from .segments import SegmentRefused
from .streams import NoGroup, RedisStream

__all__ = [
    "GroupVanished",
    "NoGroup",
    "RedisBroker",
    "RedisStream",
    "RedisTransport",
    "SegmentRefused",
]
