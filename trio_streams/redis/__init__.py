"""Redis Streams: ``RedisBroker`` and ``RedisStream`` (consumer groups), over the Trio-native
connection layer in :mod:`trio_streams.redis.client`."""

from .broker import RedisBroker, RedisTransport
from .group import GroupVanished
from .streams import NoGroup, RedisStream

__all__ = ["GroupVanished", "NoGroup", "RedisBroker", "RedisStream", "RedisTransport"]
