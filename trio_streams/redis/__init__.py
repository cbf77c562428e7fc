"""Redis: ``RedisBroker``, ``RedisStream`` (consumer groups, the pipeline window) and
``RedisList`` (work queues, simple or reliable), over the Trio-native connection layer in
:mod:`trio_streams.redis.client`."""

from .broker import RedisBroker, RedisTransport
from .group import GroupVanished
from .lists import DeadLetterKind, ListEnd, RedisList, WrongKeyType
from .segments import SegmentRefused
from .streams import NoGroup, RedisStream

__all__ = [
    "DeadLetterKind",
    "GroupVanished",
    "ListEnd",
    "NoGroup",
    "RedisBroker",
    "RedisList",
    "RedisStream",
    "RedisTransport",
    "SegmentRefused",
    "WrongKeyType",
]
