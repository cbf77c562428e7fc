"""Redis: ``RedisBroker``, ``RedisStream`` (consumer groups, the pipeline window) and
``RedisChannel`` (Pub/Sub),
over the Trio-native connection layer in :mod:`trio_streams.redis.client`."""

from .broker import RedisBroker, RedisTransport
from .channels import RedisChannel
from .group import GroupVanished
from .pubsub import PubSubFailed
from .segments import SegmentRefused
from .streams import NoGroup, RedisStream

__all__ = [
    "GroupVanished",
    "NoGroup",
    "PubSubFailed",
    "RedisBroker",
    "RedisChannel",
    "RedisStream",
    "RedisTransport",
    "SegmentRefused",
]
