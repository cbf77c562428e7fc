"""Where a message is published: a stream (the default), a list, or a channel.

A destination given as a plain ``str`` is a stream, which every transport has. Redis also has
lists (work queues) and Pub/Sub channels, so a destination can say which it means::

    await broker.publish("orders", order)                      # a stream
    await broker.publish(Destination.list("jobs"), job)        # a Redis list
    await broker.publish(Destination.channel("news"), item)    # a Redis Pub/Sub channel
    await broker.publish(Destination.channel("news", sharded=True), item)  # SPUBLISH

A sharded channel is a kind of its own (``DestinationKind.SHARD_CHANNEL``): Redis keeps sharded
and classic channels apart (a ``SUBSCRIBE`` never sees an ``SPUBLISH``), so a destination says
which one it means, as ``RedisChannel("news", sharded=True)`` does on the reading side.

A broker refuses, with ``UnsupportedError``, a kind its transport does not have (stream files
and in-process streams have streams only).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import final

from .errors import ConfigurationError

__all__ = ["Destination", "DestinationKind"]


class DestinationKind(enum.Enum):
    STREAM = "stream"
    LIST = "list"
    CHANNEL = "channel"
    SHARD_CHANNEL = "shard channel"


@final
@dataclass(frozen=True, slots=True)
class Destination:
    """A named stream, list or channel (see the module docstring)."""

    name: str
    kind: DestinationKind = DestinationKind.STREAM

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"a destination's name is a non-empty str, not {self.name!r}")
        if not isinstance(self.kind, DestinationKind):
            raise ConfigurationError(
                f"a destination's kind is a DestinationKind, not {self.kind!r}"
            )

    @classmethod
    def stream(cls, name: str) -> Destination:
        return cls(name, DestinationKind.STREAM)

    @classmethod
    def list(cls, name: str) -> Destination:
        return cls(name, DestinationKind.LIST)

    @classmethod
    def channel(cls, name: str, *, sharded: bool = False) -> Destination:
        """A Pub/Sub channel: ``PUBLISH``, or ``SPUBLISH`` with ``sharded=True``."""
        if not isinstance(sharded, bool):
            raise ConfigurationError(f"sharded is True or False, not {sharded!r}")
        return cls(name, DestinationKind.SHARD_CHANNEL if sharded else DestinationKind.CHANNEL)

    @property
    def is_channel(self) -> bool:
        """A Pub/Sub channel, classic or sharded."""
        return self.kind in (DestinationKind.CHANNEL, DestinationKind.SHARD_CHANNEL)

    @classmethod
    def of(cls, destination: str | Destination) -> Destination:
        """``destination`` as a ``Destination`` (a ``str`` names a stream)."""
        if isinstance(destination, Destination):
            return destination
        return cls(destination)

    def with_prefix(self, prefix: str) -> Destination:
        return self if not prefix else Destination(prefix + self.name, self.kind)

    def __str__(self) -> str:
        return (
            self.name if self.kind is DestinationKind.STREAM else f"{self.kind.value} {self.name}"
        )
