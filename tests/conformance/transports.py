"""What the conformance suite needs from a transport, and one fixture class per transport.

A test asks its ``transport`` fixture for an app with a broker of that transport, preloads
stream ``"s"`` with messages whose payload is their sequence number (so ``seen`` lists read like
positions), and mounts sources it makes (``transport.live()`` / ``transport.replay()``).

A transport joins the suite by adding a subclass of :class:`Transport` to :data:`TRANSPORTS`
and declaring, in ``cannot``, each :class:`Capability` it lacks and why. A test that needs a
capability says so with ``@needs(Capability...)`` (on the test or its module): the ``transport``
fixture skips it, with the transport's reason, where the capability is declared missing. A test
that uses a capability it did not declare fails instead of skipping, so nothing is skipped
silently; ``test_capabilities.py`` checks that the declarations tell the truth.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.file.apps import write_at_instants, write_numbers
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from trio_streams import App, Broker, Destination, MemoryBroker, MemoryStream, Position
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

__all__ = [
    "TRANSPORTS",
    "Capability",
    "FileTransport",
    "MemoryTransport",
    "RedisListTransport",
    "RedisPubSubTransport",
    "RedisSimpleListTransport",
    "RedisTransport",
    "Transport",
    "needs",
]


class Capability(enum.Enum):
    """Something a test may need that not every transport can do."""

    #: Handlers seek their subscription (``ctx.seeker``); sources report ``seekable``.
    SEEK = "seek a subscription"
    #: ``.replay()``: read a stream from its beginning and end after its last message.
    REPLAY = "replay a stream from its beginning"
    #: Preload messages written at instants the test chooses (for timestamp seeks).
    PIN_INSTANTS = "write messages at chosen instants"
    #: Run on Trio's ``autojump_clock``: every wait of the transport is on Trio's clock or
    #: local (a file's fsync), so jumping the clock while all tasks wait skips nothing real.
    VIRTUAL_TIME = "run on an autojump clock"
    #: Every subscription of a stream gets every message (a work queue gives each to one).
    FAN_OUT = "give every subscription of a stream every message"
    #: A live subscription starts at the tip (what was there before is never delivered) or at a
    #: position it names.
    POSITIONS = "start a live subscription at the tip or at a position"
    #: Keep what was published: a message stays once handled, for ``messages`` to read back,
    #: and a live subscription can start before the tip. Pub/Sub keeps nothing; a list entry
    #: is gone once handled.
    RETAIN = "keep what was published, handled or not"


def needs(*capabilities: Capability) -> pytest.MarkDecorator:
    """Mark a test (or a module, with ``pytestmark``) as needing ``capabilities``."""
    return pytest.mark.needs(*capabilities)


class Transport(ABC):
    """One transport as the conformance tests see it (a test fixture, not the core's ABC)."""

    #: The pytest id of the parameter.
    name: ClassVar[str]
    #: What this transport cannot do, with the reason a skipped test reports.
    cannot: ClassVar[Mapping[Capability, str]] = {}

    def __init__(self, tmp_path: Path) -> None:
        #: The test's own directory, for transports that keep files.
        self.tmp_path = tmp_path
        #: What the running test declared it needs (``@needs``), set by the fixture.
        self.needed: frozenset[Capability] = frozenset()

    def close(self) -> None:  # noqa: B027 - an optional hook; most transports start nothing
        """Release what the transport started for the test (a server); called at teardown."""

    def can(self, capability: Capability) -> bool:
        return capability not in self.cannot

    def skip_unless_able(self, capabilities: frozenset[Capability]) -> None:
        """Skip the test, saying why, unless this transport can do all of ``capabilities``
        (called by the fixture: a skip raised inside a Trio test loses its reason)."""
        self.needed = capabilities
        for capability in sorted(capabilities, key=lambda c: c.name):
            if capability in self.cannot:
                pytest.skip(f"{self.name} cannot {capability.value}: {self.cannot[capability]}")

    def require(self, *capabilities: Capability) -> None:
        """Fail unless the test declared these with ``@needs``: undeclared, a transport that
        cannot do them would fail the test instead of skipping it with a reason."""
        missing = [c.name for c in capabilities if c not in self.needed]
        if missing:
            pytest.fail(f"the test uses {missing} without declaring @needs(...) for them")

    # ---- apps and brokers --------------------------------------------------------------------

    @abstractmethod
    def broker(self) -> Broker:
        """A fresh broker of this transport (nothing shared with earlier ones)."""

    @abstractmethod
    def broker_like(self, broker: Broker) -> Broker:
        """A new broker over the same streams as ``broker`` (as another service would open)."""

    def app(self, name: str = "conformance", **options: Any) -> tuple[App, Broker]:
        """An app (``options`` are ``App``'s) with one fresh broker of this transport."""
        app = App(name, **options)
        return app, app.broker(self.broker())

    # ---- preloading, before the app runs -----------------------------------------------------

    @abstractmethod
    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        """Write ``count`` messages to ``stream``, payloads 1..count: each its sequence number."""

    def preload_json(self, broker: Broker, values: Sequence[Any], *, stream: str = "s") -> None:
        """Write each of ``values`` to ``stream``, JSON-encoded."""
        for value in values:
            self._append(broker, stream, json.dumps(value).encode())

    @abstractmethod
    def _append(self, broker: Broker, stream: str, payload: bytes) -> None: ...

    @abstractmethod
    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
        """Every message in ``stream`` now, as (payload, headers), in order."""

    def dead_lettered(self, broker: Broker, name: str) -> list[tuple[bytes, dict[str, str]]]:
        """Every dead letter in ``name`` (a ``dead_letter=`` destination: a stream, kept on
        every transport), as ``messages`` gives them."""
        return self.messages(broker, name)

    def to(self, name: str) -> str | Destination:
        """What the tests publish to for ``name``: a stream, or what this transport's
        ``live(name)`` reads (a Pub/Sub channel)."""
        return name

    def dead_letters(self, name: str) -> Source:
        """A live source reading the dead letters sent to ``dead_letter=name``: a stream."""
        return self.live(name)

    def preload_at(self, broker: Broker, instants: Sequence[int], *, stream: str = "s") -> None:
        """As ``preload``, the n-th message written at ``instants[n - 1]`` (epoch ms)."""
        self.require(Capability.PIN_INSTANTS)
        self._preload_at(broker, instants, stream)

    def _preload_at(self, broker: Broker, instants: Sequence[int], stream: str) -> None:
        raise NotImplementedError(f"{self.name} declares that it can pin instants but cannot")

    # ---- sources -----------------------------------------------------------------------------

    @abstractmethod
    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        """A live subscription's source: it starts at the tip (or ``start_at``) and follows."""

    def replay(self, *streams: str, start_at: Position | None = None) -> Source:
        """A replay's source: from the beginning (or ``start_at``) to the last message."""
        self.require(Capability.REPLAY)
        return self._replay(streams or ("s",), start_at)

    def _replay(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        raise NotImplementedError(f"{self.name} declares that it can replay but cannot")

    # ---- what a refusal says -----------------------------------------------------------------

    @abstractmethod
    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        """Fragments the refusal of ``sequence(asked)`` on stream ``s`` (whose last sequence is
        ``last``) must contain: it says why, and where."""

    def __repr__(self) -> str:
        return f"<{self.name} transport>"


class MemoryTransport(Transport):
    name = "memory"

    def broker(self) -> Broker:
        return MemoryBroker()

    def broker_like(self, broker: Broker) -> Broker:
        twin = MemoryBroker()
        twin.hub = self._hub(broker)
        return twin

    def _append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self._hub(broker).append(stream, payload, {})

    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
        log = self._hub(broker).log(stream)
        return [(e.payload, dict(e.headers)) for e in log.slice(log.first_seq, log.next_seq)]

    @staticmethod
    def _hub(broker: Broker) -> MemoryHub:
        assert isinstance(broker, MemoryBroker)
        return broker.hub

    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        hub = self._hub(broker)
        for n in range(1, count + 1):
            assert hub.append(stream, str(n).encode(), {}).seq == n

    def _preload_at(self, broker: Broker, instants: Sequence[int], stream: str) -> None:
        hub = self._hub(broker)
        for n, ms in enumerate(instants, 1):
            entry = hub.append(stream, str(n).encode(), {})
            assert entry.seq == n
            entry.timestamp_ms = ms  # pin the instant

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        return MemoryStream(*(streams or ("s",)), start_at=start_at)

    def _replay(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return MemoryStream(*streams, start_at=start_at).replay()

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        return (f"sequence {asked} of stream 's'", f"past the next one it will write ({last + 1})")


class FileTransport(Transport):
    name = "file"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._numbers = itertools.count(1)

    def broker(self) -> Broker:
        return FileBroker(self.tmp_path / f"conformance-{next(self._numbers)}.ss")

    def broker_like(self, broker: Broker) -> Broker:
        return FileBroker(self._path(broker))

    def _append(self, broker: Broker, stream: str, payload: bytes) -> None:
        with StreamWriter(self._path(broker), beacon_interval=1024) as writer:
            writer.append(stream, payload)

    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
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

    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        write_numbers(self._path(broker), count, key=stream)

    def _preload_at(self, broker: Broker, instants: Sequence[int], stream: str) -> None:
        write_at_instants(self._path(broker), list(instants), key=stream)

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        return FileStream(*(streams or ("s",)), start_at=start_at)

    def _replay(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        return FileStream(*streams, start_at=start_at).replay()

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        return (str(self.tmp_path), f"seq:{asked}", "stream 's'", f"past the last sequence {last}")


class RedisTransport(Transport):
    """Redis streams read through consumer groups, on a server of the test's own.

    ``live`` subscriptions are group members with the default group (one per subscription).
    Preloaded entries get the ids ``0-<n>``, so ``Position.sequence(n)`` maps to the entry
    ``0-<n>`` and what is published afterwards (``<ms>-<seq>``) comes after them.
    """

    name = "redis"
    cannot: ClassVar[Mapping[Capability, str]] = {
        Capability.SEEK: "a consumer group member cannot seek (moving a group is XGROUP SETID)",
        Capability.REPLAY: "a Redis replay reads without a group and can seek, while this "
        "suite's live subscription is a group member, which cannot; the suite's replays also "
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

    def _append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("XADD", stream, "*", *encode_fields(payload, {}))

    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
        return [
            decode_fields(fields) for _, fields in self.server.command("XRANGE", stream, "-", "+")
        ]

    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        for n in range(1, count + 1):
            self.server.command("XADD", stream, f"0-{n}", *encode_fields(str(n).encode(), {}))

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        (stream,) = streams or ("s",)
        if start_at is not None and start_at.kind is PositionKind.SEQUENCE:
            start_at = Position.entry(f"0-{start_at.seq}")
        return RedisStream(stream, start=start_at)

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        raise NotImplementedError("a Redis group subscription cannot seek")


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

    def dead_lettered(self, broker: Broker, name: str) -> list[tuple[bytes, dict[str, str]]]:
        return super().messages(broker, name)

    def _append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("PUBLISH", stream, encode_frame(payload, {}))

    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
        self.require(Capability.RETAIN)
        raise NotImplementedError("declared: a channel keeps nothing")

    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        for n in range(1, count + 1):
            self._append(broker, stream, str(n).encode())

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        if start_at is not None:
            self.require(Capability.RETAIN)
        return RedisChannel(*(streams or ("s",)), dead_letter_kind="stream")


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

    def _append(self, broker: Broker, stream: str, payload: bytes) -> None:
        self.server.command("RPUSH", stream, encode_frame(payload, {}))

    def messages(self, broker: Broker, stream: str) -> list[tuple[bytes, dict[str, str]]]:
        return [decode_frame(value) for value in self.server.command("LRANGE", stream, 0, -1)]

    def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        for n in range(1, count + 1):
            self._append(broker, stream, str(n).encode())

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        (stream,) = streams or ("s",)
        assert start_at is None, "a list has no positions (the test needs POSITIONS)"
        return RedisList(stream, reliable=self.reliable)


class RedisSimpleListTransport(RedisListTransport):
    """Simple Redis lists (popped: at-most-once)."""

    name = "redis-list-simple"
    reliable = False


#: Every transport the suite runs on, by parameter id.
TRANSPORTS: dict[str, type[Transport]] = {
    "memory": MemoryTransport,
    "file": FileTransport,
    "redis": RedisTransport,
    "redis-pubsub": RedisPubSubTransport,
    "redis-list": RedisListTransport,
    "redis-list-simple": RedisSimpleListTransport,
}
