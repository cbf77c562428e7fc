"""This repository's transports as the conformance suite sees them: one
:class:`~trio_streams.testing.conformance.TransportUnderTest` each, by parameter id.

Each declares, in ``cannot``, what its transport cannot do and why; the suite skips the tests
that need it, saying so.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from tests.file.apps import write_numbers
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from trio_streams import Broker, Destination, MemoryBroker, MemoryStream, Position
from trio_streams.core.positions import PositionKind
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.memory.log import MemoryHub
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.frames import decode_frame, encode_frame
from trio_streams.redis.wire import decode_fields, encode_fields
from trio_streams.testing.conformance import Capability, Message, TransportUnderTest

__all__ = [
    "TRANSPORTS",
    "FileGroupTransport",
    "FileTransport",
    "MemoryTransport",
    "RedisListTransport",
    "RedisPubSubTransport",
    "RedisSimpleListTransport",
    "RedisTransport",
]


class MemoryTransport(TransportUnderTest):
    name = "memory"

    def broker(self) -> Broker:
        return MemoryBroker()

    def broker_like(self, broker: Broker) -> Broker:
        twin = MemoryBroker()
        twin.hub = self._hub(broker)
        return twin

    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self._hub(broker).append(stream, payload, {})

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        log = self._hub(broker).log(stream)
        return [(e.payload, dict(e.headers)) for e in log.slice(log.first_seq, log.next_seq)]

    @staticmethod
    def _hub(broker: Broker) -> MemoryHub:
        assert isinstance(broker, MemoryBroker)
        return broker.hub

    async def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        hub = self._hub(broker)
        for n in range(1, count + 1):
            assert hub.append(stream, str(n).encode(), {}).seq == n

    async def append_at(self, broker: Broker, stream: str, payload: bytes, at_ms: int) -> None:
        self._hub(broker).append(stream, payload, {}).timestamp_ms = at_ms  # pin the instant

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return MemoryStream(*streams, start_at=start_at)

    def replay_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return MemoryStream(*streams, start_at=start_at).replay()

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        return (f"sequence {asked} of stream 's'", f"past the next one it will write ({last + 1})")


class FileTransport(TransportUnderTest):
    name = "file"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._numbers = itertools.count(1)

    def broker(self) -> Broker:
        return FileBroker(self.tmp_path / f"conformance-{next(self._numbers)}.ss")

    def broker_like(self, broker: Broker) -> Broker:
        return FileBroker(self._path(broker))

    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        with StreamWriter(self._path(broker), beacon_interval=1024) as writer:
            writer.append(stream, payload)

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        path = self._path(broker)
        if not path.exists():
            return []
        reader = FileReader(path, keys=[stream])
        try:
            found = []
            while batch := reader.read_messages(1024):
                for message in batch:
                    payload, headers = open_envelope(message.payload)
                    found.append((payload, dict(headers)))
            return found
        finally:
            reader.close()

    @staticmethod
    def _path(broker: Broker) -> Path:
        assert isinstance(broker, FileBroker)
        return Path(broker.path)

    async def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        write_numbers(self._path(broker), count, key=stream)

    async def append_at(self, broker: Broker, stream: str, payload: bytes, at_ms: int) -> None:
        with StreamWriter(self._path(broker), beacon_interval=1024) as writer:
            writer.append(stream, payload, timestamp_ms=at_ms)

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return FileStream(*streams, start_at=start_at)

    def replay_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return FileStream(*streams, start_at=start_at).replay()

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        return (str(self.tmp_path), f"seq:{asked}", "stream 's'", f"past the last sequence {last}")


class FileGroupTransport(FileTransport):
    """Members of consumer groups on a stream file: each subscription is the only member of a
    group of its own (a new name per source), so a seek, which a member may make only while it
    is alone in its group, moves it, and every subscription gets every message."""

    name = "file-group"
    cannot: ClassVar[Mapping[Capability, str]] = {
        Capability.RETRY_COPIES: "a group's member runs a retried message again itself, and a "
        "retry_after waits in the group's state: no copy is written to the file",
        Capability.TRIO_CLOCK_DELAYS: "a retry_after is kept in the group's state, due at an "
        "instant of the wall clock that every member of every process reads",
    }

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._groups = itertools.count(1)

    def _group(self) -> str:
        return f"g{next(self._groups)}"

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return FileStream(*streams, start_at=start_at).group(self._group())

    def replay_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return FileStream(*streams, start_at=start_at).replay().group(self._group())


class RedisTransport(TransportUnderTest):
    """Redis streams read through consumer groups, on a server of the test's own.

    ``live`` subscriptions are group members with the default group (one per subscription),
    which a seek moves (alone in it: nothing else reads it).
    Preloaded entries get the ids ``0-<n>``, so ``Position.sequence(n)`` maps to the entry
    ``0-<n>`` and what is published afterwards (``<ms>-<seq>``) comes after them.
    """

    name = "redis"
    cannot: ClassVar[Mapping[Capability, str]] = {
        Capability.REPLAY: "a Redis replay reads without a group, while this suite's live "
        "subscription is a group member, whose seek moves its group; the suite's replays also "
        "address messages by sequence number, Redis by entry id (plain replays and their "
        "seeks are tested in tests/redis/streams)",
        Capability.PIN_INSTANTS: "an entry's instant is its id, chosen by the server here",
        Capability.VIRTUAL_TIME: "a real server's replies take real time, which an autojump "
        "clock jumps past (timers fire while a reply is on its way)",
    }

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._servers = contextlib.ExitStack()
        self._server: RedisServer | None = None

    @property
    def server(self) -> RedisServer:
        """The test's server, started at first use (a skipped test starts none)."""
        if self._server is None:
            self._server = self._servers.enter_context(start_redis_server())
        return self._server

    def close(self) -> None:
        self._servers.close()

    def broker(self) -> Broker:
        return RedisBroker(self.server.url)

    def broker_like(self, broker: Broker) -> Broker:
        assert isinstance(broker, RedisBroker)
        return RedisBroker(broker.url)

    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("XADD", stream, "*", *encode_fields(payload, {}))

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        return [
            decode_fields(fields) for _, fields in self.server.command("XRANGE", stream, "-", "+")
        ]

    async def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        for n in range(1, count + 1):
            self.server.command("XADD", stream, f"0-{n}", *encode_fields(str(n).encode(), {}))

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        (stream,) = streams
        if start_at is not None and start_at.kind is PositionKind.SEQUENCE:
            start_at = Position.entry(f"0-{start_at.seq}")
        return RedisStream(stream, start=start_at)

    def preloaded_position(self, n: int) -> Position:
        """A group member seeks by entry id (moving its group, which it is alone in)."""
        return Position.entry(f"0-{n}")


class RedisPubSubTransport(RedisTransport):
    """Redis Pub/Sub: ``live(name)`` subscribes to channel ``name``, and the tests publish to
    it (``to``). Live only and at most once: a channel keeps nothing, so nothing can be
    replayed, sought, started before the tip or read back; "preloading" publishes to a channel
    nobody hears yet (the messages are gone, which is what a live subscription must show).
    Its subscriptions dead-letter to a stream (``dead_letter_kind="stream"``), which is kept,
    and the letters are read as a stream's (the default, a copy published to a channel, is
    tested with the Pub/Sub tests).
    """

    name = "redis-pubsub"
    cannot: ClassVar[Mapping[Capability, str]] = {
        Capability.SEEK: "a channel keeps nothing to seek in",
        Capability.REPLAY: "a channel keeps nothing to replay",
        Capability.RETAIN: "a channel keeps nothing: a subscription starts at the tip, and "
        "what was published cannot be read back",
        Capability.PIN_INSTANTS: "a channel keeps nothing, at any instant",
        Capability.VIRTUAL_TIME: RedisTransport.cannot[Capability.VIRTUAL_TIME],
    }

    def to(self, name: str) -> str | Destination:
        return Destination.channel(name)

    def dead_letters(self, name: str) -> Source:
        return RedisStream(name)

    async def dead_lettered(self, broker: Broker, name: str) -> list[Message]:
        return await super().messages(broker, name)

    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("PUBLISH", stream, encode_frame(payload, {}))

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        self.require(Capability.RETAIN)
        raise NotImplementedError("declared: a channel keeps nothing")

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        if start_at is not None:
            self.require(Capability.RETAIN)
        return RedisChannel(*streams, dead_letter_kind="stream")


class _ListBroker(RedisBroker):
    """A Redis broker whose stream names are lists: the suite publishes to ``"s"``, and here
    that is ``Destination.list("s")``."""

    async def publish(
        self,
        destination: str | Destination,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        if isinstance(destination, str):
            destination = Destination.list(destination)
        return await super().publish(destination, message, headers=headers)


class RedisListTransport(RedisTransport):
    """Reliable Redis lists (a processing list per consumer), on a server of the test's own:
    a work queue, so what a stream does for every subscription it does for one."""

    name = "redis-list"
    reliable = True
    cannot: ClassVar[Mapping[Capability, str]] = {
        Capability.SEEK: "a list has no positions to seek to",
        Capability.REPLAY: "a handled list entry is gone: there is nothing to replay",
        Capability.PIN_INSTANTS: "a list entry records no instant",
        Capability.VIRTUAL_TIME: RedisTransport.cannot[Capability.VIRTUAL_TIME],
        Capability.FAN_OUT: "a list is a work queue: each entry goes to one of its consumers",
        Capability.POSITIONS: "a list has no tip and no positions: its consumers take whatever "
        "it holds, from the front, preloaded or not",
        Capability.RETAIN: "a list entry is gone once handled",
    }

    def broker(self) -> Broker:
        return _ListBroker(self.server.url)

    def broker_like(self, broker: Broker) -> Broker:
        assert isinstance(broker, RedisBroker)
        return _ListBroker(broker.url)

    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("RPUSH", stream, encode_frame(payload, {}))

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        return [decode_frame(value) for value in self.server.command("LRANGE", stream, 0, -1)]

    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        (stream,) = streams
        assert start_at is None, "a list has no positions (the test needs POSITIONS)"
        return RedisList(stream, reliable=self.reliable)


class RedisSimpleListTransport(RedisListTransport):
    """Simple Redis lists (popped: at-most-once)."""

    name = "redis-list-simple"
    reliable = False


#: Every transport the suite runs on, by parameter id.
TRANSPORTS: list[type[TransportUnderTest]] = [
    MemoryTransport,
    FileTransport,
    RedisTransport,
    RedisPubSubTransport,
    RedisListTransport,
    RedisSimpleListTransport,
    FileGroupTransport,
]
