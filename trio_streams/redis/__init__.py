"""Redis: ``RedisBroker``; ``RedisStream`` (consumer groups, the pipeline window),
``RedisList`` (work queues, simple or reliable) and ``RedisChannel`` (Pub/Sub), over the
Trio-native connection layer in :mod:`trio_streams.redis.client`."""

from .broker import RedisBroker, RedisTransport
from .channels import RedisChannel
from .companions import companion_key
from .group import GroupVanished
from .lists import ConsumerNameInUse, DeadLetterKind, ListEnd, RedisList, WrongKeyType
from .pubsub import PubSubFailed
from .segments import SegmentRefused
from .streams import DeletePolicy, NoGroup, RedisStream
from .wire import ForeignPayloadError, entry_fields

__all__ = [
    "ConsumerNameInUse",
    "DeadLetterKind",
    "DeletePolicy",
    "ForeignPayloadError",
    "GroupVanished",
    "ListEnd",
    "NoGroup",
    "PubSubFailed",
    "RedisBroker",
    "RedisChannel",
    "RedisList",
    "RedisStream",
    "RedisTransport",
    "SegmentRefused",
    "WrongKeyType",
    "companion_key",
    "entry_fields",
]
