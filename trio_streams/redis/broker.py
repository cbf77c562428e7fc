"""``RedisBroker``: Redis Streams subscriptions and publishing over the connection layer.

- **Publishing** is one ``XADD``: the payload in ``_payload``, each header in ``h:<name>``
  (:mod:`.wire`); the receipt is the entry's position, ``Position.entry(id, stream=key)``.
  ``maxlen=`` / ``minid=`` trim the stream as it is written: ``XACK`` never deletes an
  entry, so a stream grows until trimmed. By default a trim never cuts an entry a consumer
  group has not acknowledged (``trim="safe"``); ``trim="unsafe"`` is the plain trim, which
  can (:mod:`.trimming`).
- **Subscriptions** (``RedisStream``) are consumer group members (:mod:`.group`), one dedicated
  connection each for the blocking read.
- **The pipeline window** (``pipeline=True``, ``atomic=True``) on group subscriptions: a
  handler's ``ctx.pipeline`` commands leave with the read's ``XACK`` in one round trip
  (:mod:`.window`, :mod:`.segments`).
- **Lists** (``RedisList``, :mod:`.lists`): work queues, simple (at-most-once) or reliable
  (a processing list per consumer); publishing to ``Destination.list(key)`` pushes one frame
  (:mod:`.frames`) at the end the list's consumers do not take from.
- **Pub/Sub** (``RedisChannel``: channels, patterns, sharded channels) is at most once; see
  :mod:`.pubsub`. ``broker.publish(Destination.channel("news"), msg)`` is one ``PUBLISH``
  (``SPUBLISH`` for ``Destination.channel("news", sharded=True)``) of the list/Pub/Sub frame
  (:mod:`.frames`); the receipt is the number of subscribers that received it (in a cluster,
  a classic channel's count is of the node that took the ``PUBLISH``).
- **Refused at mount**: ``pipeline=True`` on a plain stream (no group: nothing to
  acknowledge) or on a simple list (popped entries: nothing to acknowledge), ``atomic=True``
  without ``pipeline=True``, and, on a cluster, a stream's dead letter whose key does not
  share the stream's hash slot (its copy and the acknowledgement could not be one
  transaction): name it in the slot, with the stream's hash tag (``{orders}`` and
  ``{orders}.dead``) or as its companion (:func:`~.companions.companion_key`:
  ``{orders}:dead`` for ``orders``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar
from urllib.parse import urlsplit

import trio

from ..core.broker import Broker
from ..core.description import Binding, BrokerDescription, Server
from ..core.destinations import Destination, DestinationKind
from ..core.errors import ConfigurationError, UnsupportedError, WrongKeyType
from ..core.extras import require
from ..core.group_moves import GroupMove
from ..core.pipeline import CommandCheck
from ..core.positions import Position
from ..core.process import process_name
from ..core.routing import Declared
from ..core.transport import Source, SubscriptionSource, Transport, read_count_option
from ..memory.broker import MemoryTransport
from ..memory.group_moves import move_memory_group
from .channels import RedisChannel
from .client import RedisClient, connect, key_slot, parse_url
from .client.capabilities import ServerCommands
from .client.errors import ReplyError
from .companions import companion_key
from .frames import encode_frame
from .group import GroupSubscription
from .group_position import move_group, refuse_position
from .keytypes import check_publisher_keys
from .list_base import wrong_type
from .list_reliable import ReliableListSubscription
from .list_simple import SimpleListSubscription
from .lists import ListEnd, RedisList
from .offers import read_offers
from .plain import PlainSubscription
from .pubsub import ChannelSubscription
from .segments import segment_check
from .streams import Mode, RedisStream
from .trimming import Trim, Trimmer, TrimPolicy
from .wire import encode_fields, text

__all__ = ["DEFAULT_BLOCK_MS", "DEFAULT_COUNT", "RedisBroker", "RedisTransport"]

#: Entries taken per read unless the subscription says ``count=``.
DEFAULT_COUNT = 100
#: How long one blocking read waits for new entries (ms) unless the subscription says ``block=``:
#: bounded, so a read notices a vanished group and reclaimed entries within it.
DEFAULT_BLOCK_MS = 1000

#: How a publisher writes each kind of destination, as its AsyncAPI binding says it.
_WRITES = {
    kind: Binding("redis", {"method": method})
    for kind, method in (
        (DestinationKind.STREAM, "xadd"),
        (DestinationKind.LIST, "rpush"),
        (DestinationKind.CHANNEL, "publish"),
        (DestinationKind.SHARD_CHANNEL, "spublish"),
    )
}

#: Numbers the reliable list subscriptions of this process that name no consumer.
_list_consumers = itertools.count(1)


def default_consumer() -> str:
    """This process's consumer name, ``host-pid-random``: the same for all its subscriptions,
    another one in a forked child."""
    return process_name()


class RedisBroker(Broker):
    """Redis Streams through consumer groups (standalone, cluster or sentinel URL).

    ``group`` / ``consumer``: defaults for the ``RedisStream`` subscriptions that name none.
    ``maxlen`` / ``minid``: trim streams as this broker publishes (approximately, ``~``,
    unless ``exact_trim=True``). ``trim`` says what a trim may cut (:mod:`.trimming`):

    - ``"safe"`` (default): never an entry some consumer group has not read or acknowledged,
      by a bound computed from the groups, on any server (``"groups"`` names the same);
    - ``"acked"``: the server's ``XADD … ACKED`` instead, refused at connect by a server
      without it (see :mod:`.trimming` for why it is not the default);
    - ``"unsafe"``: the plain ``XADD … MAXLEN``/``MINID`` on every publish, which **can lose
      entries a group has not read or acknowledged**.

    The safe forms trim on the first publish to a stream and then every ``trim_every``-th
    (default 100, or 1 with ``exact_trim=True``), in the same one command as the ``XADD``. A
    stream with no group is trimmed as ``maxlen``/``minid`` say; one whose group stopped
    reading grows until the group moves or is deleted.

    Subscriber options: ``count`` — entries per read (default 100); ``block`` — ms one blocking
    read waits (default 1000); ``pipeline=True`` — the pipeline window: commands a handler
    queues on ``ctx.pipeline`` are sent with the read's acknowledgement, in one round trip, and
    only for deliveries whose outcome is ``ack``; ``atomic=True`` (with ``pipeline=True``) —
    each delivery's commands and its ``XACK`` in one ``MULTI``/``EXEC``.
    """

    source_types: ClassVar[tuple[type[Source], ...]] = (
        RedisStream,
        RedisList,
        RedisChannel,
    )
    destination_kinds: ClassVar[frozenset[DestinationKind]] = frozenset(
        {
            DestinationKind.STREAM,
            DestinationKind.LIST,
            DestinationKind.CHANNEL,
            DestinationKind.SHARD_CHANNEL,
        }
    )
    subscriber_options = frozenset({"count", "block", "pipeline", "atomic"})
    kind = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379",
        *,
        group: str | None = None,
        consumer: str | None = None,
        maxlen: int | None = None,
        minid: str | None = None,
        exact_trim: bool = False,
        trim: Trim | None = None,
        trim_every: int | None = None,
        name: str | None = None,
        prefix: str = "",
        **defaults: Any,
    ) -> None:
        config = parse_url(url)  # a bad URL fails here, at declaration
        super().__init__(name=name or "redis", prefix=prefix, **defaults)
        self.url = url
        self.cluster = config.topology == "cluster"
        for what, value in (("group", group), ("consumer", consumer)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"{what} must be a non-empty string, not {value!r}")
        #: How publishing trims streams (:mod:`.trimming`), or None when it does not.
        self.trim = TrimPolicy.from_options(
            maxlen=maxlen, minid=minid, exact_trim=exact_trim, trim=trim, trim_every=trim_every
        )
        self.group = group
        self.consumer = consumer

    def description(self) -> BrokerDescription:
        """Its server is its URL's host and port, ``redis`` or ``rediss``, and its topology (a
        password in the URL is never shown); it writes with ``xadd``, ``rpush``, ``publish``,
        ``spublish``."""
        parts = urlsplit(self.url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        server: Server = {
            "host": f"{host}{port}",
            "protocol": parts.scheme or "redis",
            "description": "a Redis cluster" if self.cluster else "Redis",
        }
        if parts.path and parts.path != "/":
            server["pathname"] = parts.path
        return BrokerDescription(kind=self.kind, system="redis", server=server, writes=_WRITES)

    def check_installed(self) -> None:
        """Without hiredis (the ``redis`` extra) a connection cannot parse a reply: refused
        here, before the app starts; declaring and ``app.test()`` need no parser."""
        require("redis", "RedisBroker")

    def source_for(self, name: str) -> RedisStream:
        """A plain name is ``RedisStream(name)``: a member of a consumer group of the stream
        ``name`` — this broker's ``group=``, else one named after the app that runs it
        (``<app>/<subscription>``) — from the tip the first time, resuming where the group
        left after a restart, splitting the entries among the processes of the app."""
        return RedisStream(name)

    def prepare(self, declared: Declared) -> None:
        """A group stream without a group or consumer takes the broker's; its dead letter must
        share its slot on a cluster (one transaction writes the copy and the ``XACK``)."""
        source = declared.source
        if isinstance(source, RedisStream) and source.mode is Mode.GROUP:
            declared.source = source.with_defaults(group=self.group, consumer=self.consumer)
            dead_letter = declared.options.policy.dead_letter
            key = self.prefix + source.key
            if dead_letter and not self.same_slot(key, dead_letter):
                raise UnsupportedError(
                    f"handler {declared.handler.name}: dead letter {dead_letter!r} and stream "
                    f"{key!r} hash to different cluster slots, so the copy and the XACK "
                    "cannot be one transaction; name the dead letter in the stream's slot, "
                    f"e.g. {companion_key(key, 'dead')!r}"
                )

    def reply_command(
        self, address: str, payload: bytes, headers: Mapping[str, str]
    ) -> tuple[str, tuple[str | bytes, ...]] | None:
        """A reply's ``PUBLISH`` of the list/Pub/Sub frame, for the pipeline window: on a
        subscription with ``pipeline=True`` a request's reply leaves with the read's ``XACK``
        in one round trip. Only on a live connection (under ``app.test()`` the in-process
        window records its commands and sends nothing)."""
        if not isinstance(self._transport, RedisTransport):
            return None
        return ("PUBLISH", (address, encode_frame(payload, headers)))

    def reply_source(self, address: str) -> Source:
        """Replies to this process's requests come on a Pub/Sub channel of its own: one
        connection for every request in flight, nothing to clean up at the server, and in a
        cluster a classic ``PUBLISH`` reaches the subscriber on whichever node it is."""
        return RedisChannel(address)

    def _reached_nobody(self, target: Destination, receipt: Any) -> bool:
        """In a cluster a classic ``PUBLISH`` counts the subscribers of the node that took it
        only (the cluster bus carries it to the others): 0 there does not mean nobody."""
        if self.cluster and target.kind is DestinationKind.CHANNEL:
            return False
        return super()._reached_nobody(target, receipt)

    async def set_group_position(
        self, stream: str, group: str, position: Position, *, dry_run: bool = False
    ) -> GroupMove:
        """Move consumer group ``group`` of stream key ``stream`` to ``position``, for every
        consumer of it: ``Position.beginning()``, ``Position.end()`` (the last id given out now),
        ``Position.entry(id)`` (that entry is delivered next) or ``Position.timestamp(ms)``
        (the first entry strictly later). ``XGROUP SETID``, with ``ENTRIESREAD`` where the
        server takes it, so the group's lag stays right (:mod:`.group_position`).

        ``dry_run=True`` moves nothing and says what the move would skip or replay. Returns
        a :class:`~trio_streams.core.group_moves.GroupMove`. Raises ``GroupNotFound`` (the
        stream or the group is missing) and ``PositionRefused`` (``Position.sequence``, an
        id or instant past the last id the stream gave out, deleted or not, another stream),
        typed, with nothing moved. Live consumers are not refused (see the guide); their
        read-ahead and pending entries stay theirs.

        Uses the running app's connection; outside one, a connection of its own to ``url``.
        Under ``app.test()`` it moves the in-process group, with the same refusals (and an
        entry id refused: in-process streams have none)."""
        if not isinstance(position, Position):
            raise TypeError(f"position must be a Position, not {type(position).__name__}")
        refuse_position(position, stream)
        transport = self._transport
        if isinstance(transport, RedisTransport):
            return await move_group(transport.client, stream, group, position, dry_run=dry_run)
        if isinstance(transport, MemoryTransport):
            await trio.lowlevel.checkpoint()
            return move_memory_group(transport.hub, stream, group, position, dry_run=dry_run)
        async with connect(self.url) as client:
            return await move_group(client, stream, group, position, dry_run=dry_run)

    def same_slot(self, key: str, other: str) -> bool:
        """Whether ``key`` and ``other`` can be in one transaction (always, off a cluster)."""
        return not self.cluster or key_slot(key) == key_slot(other)

    def check_subscription(self, source: Source, options: Mapping[str, Any]) -> None:
        super().check_subscription(source, options)
        read_count_option(options, DEFAULT_COUNT)
        _block_option(options)
        window = _window_options(options)
        if isinstance(source, RedisChannel):
            _check_channel_options(self.name, source, options, window=window)
        if window and isinstance(source, RedisStream) and source.mode is not Mode.GROUP:
            raise UnsupportedError(
                f"{self.name}: pipeline=True needs a consumer group: a plain stream read "
                f"({source!r}) acknowledges nothing for the window to send its commands with"
            )
        if isinstance(source, RedisList) and source.reliable and source.consumer is not None:
            for other in self.subscriptions:
                mounted = other.source
                if (
                    isinstance(mounted, RedisList)
                    and mounted.reliable
                    and mounted.key == source.key
                    and mounted.consumer == source.consumer
                ):
                    raise ConfigurationError(
                        f"{self.name}: subscription {other.name!r} already consumes list "
                        f"{source.key!r} as {source.consumer!r}: two subscriptions of one name "
                        "would share a processing list (entries handed out twice); give each "
                        "its own consumer name, or leave consumer= out"
                    )
        if window and isinstance(source, RedisList) and not source.reliable:
            raise UnsupportedError(
                f"{self.name}: pipeline=True needs a reliable list: a simple list ({source!r}) "
                "pops its entries, so there is nothing to acknowledge for the window to send "
                "its commands with; use RedisList(key, reliable=True)"
            )

    def segment_check(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> CommandCheck | None:
        """What a window segment of this subscription may hold (:mod:`.segments`): the same
        check live and under ``app.test()``, where the committed snapshot of commands stands
        in for the server's table."""
        return self._segment_check(source, options, label=label, commands=None)

    def _segment_check(
        self,
        source: Source,
        options: Mapping[str, Any],
        *,
        label: str,
        commands: Callable[[], ServerCommands] | None,
    ) -> CommandCheck | None:
        """:meth:`segment_check`, live: ``commands`` gives the connected client's table."""
        if not options.get("pipeline") or not isinstance(source, RedisStream | RedisList):
            return None
        atomic = bool(options.get("atomic"))
        slot_key = source.key if self.cluster and atomic else None
        if commands is None:
            return segment_check(label, atomic=atomic, slot_key=slot_key)
        return segment_check(label, atomic=atomic, slot_key=slot_key, commands=commands)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        async with connect(self.url) as client:
            # The server's command table: XACKDEL for settles, keys for segments, which safe
            # trim this server takes.
            await read_offers(client, [(s.name, s.source) for s in self.subscriptions])
            trimmer = Trimmer(client, self.trim)
            trimmer.check_server()
            await check_publisher_keys(
                client, [(s.name, p.target) for s in self.subscriptions for p in s.publishers]
            )
            yield RedisTransport(self, client, trimmer)


def _window_options(options: Mapping[str, Any]) -> bool:
    for name in ("pipeline", "atomic"):
        value = options.get(name, False)
        if not isinstance(value, bool):
            raise ConfigurationError(f"{name} is True or False, not {value!r}")
    if options.get("atomic") and not options.get("pipeline"):
        raise ConfigurationError(
            "atomic=True is a form of the pipeline window: give pipeline=True too"
        )
    return bool(options.get("pipeline"))


def _check_channel_options(
    broker: str, source: RedisChannel, options: Mapping[str, Any], *, window: bool
) -> None:
    """What a Pub/Sub subscription refuses at mount (live and under ``app.test()``)."""
    if window:
        raise UnsupportedError(
            f"{broker}: pipeline=True needs something to acknowledge, and a Pub/Sub message "
            f"({source!r}) has nothing: there is no settle for the window to send its commands with"
        )
    if "block" in options:
        raise UnsupportedError(
            f"{broker}: block= bounds a blocking stream read; {source!r} is pushed by the "
            "server and has none"
        )


def _block_option(options: Mapping[str, Any]) -> int:
    block = options.get("block", DEFAULT_BLOCK_MS)
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= 60_000:
        raise ConfigurationError(f"block takes milliseconds in [1, 60000], not {block!r}")
    return block


class RedisTransport(Transport):
    """A connected ``RedisBroker``: its client and its group subscriptions."""

    def __init__(
        self, broker: RedisBroker, client: RedisClient, trimmer: Trimmer | None = None
    ) -> None:
        self.broker = broker
        self.client = client
        self.trimmer = trimmer or Trimmer(client, broker.trim)

    async def publish(
        self, destination: str, payload: bytes, headers: Mapping[str, str]
    ) -> Position:
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        try:
            entry_id = await self.trimmer.add(destination, encode_fields(payload, headers))
        except ReplyError as exc:
            if exc.code == "WRONGTYPE":
                raise WrongKeyType(
                    f"publish to stream {destination!r}: key {destination!r} does not hold a "
                    f"stream ({exc.message}); use another key, or delete this one"
                ) from exc
            raise
        return Position.entry(text(entry_id), stream=destination)

    async def publish_to(
        self, destination: Destination, payload: bytes, headers: Mapping[str, str]
    ) -> Any:
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if destination.is_channel:
            command = "SPUBLISH" if destination.kind is DestinationKind.SHARD_CHANNEL else "PUBLISH"
            return await self.client.execute(
                command, destination.name, encode_frame(payload, headers)
            )
        if destination.kind is not DestinationKind.LIST:
            return await super().publish_to(destination, payload, headers)
        # The list's consumers take from the left unless it says otherwise: push at the right.
        end = self._list_ends.get(destination.name, ListEnd.LEFT)
        try:
            return await self.client.execute(
                end.push, destination.name, encode_frame(payload, headers)
            )
        except ReplyError as exc:
            if exc.code == "WRONGTYPE":
                raise wrong_type(f"publish to {destination}", destination.name, exc) from exc
            raise

    async def unserved(self, destination: Destination) -> str:
        """For a stream: missing, without a consumer group, or with groups but no consumer
        (``XINFO GROUPS``); for a list or channel: nothing (a list's readers leave no trace)."""
        if destination.kind is not DestinationKind.STREAM:
            await trio.lowlevel.checkpoint()
            return ""
        key = destination.name
        try:
            groups = await self.client.execute("XINFO", "GROUPS", key)
        except ReplyError as exc:
            if "no such key" in exc.message.lower():
                return f"stream {key!r} does not exist: nothing reads it"
            return ""
        if not groups:
            return f"stream {key!r} has no consumer group: nothing serves it"
        consumers = 0
        for group in groups:
            if isinstance(group, list):
                group = dict(zip(group[::2], group[1::2], strict=False))
            consumers += sum(int(v) for k, v in group.items() if text(k) == "consumers")
        if not consumers:
            return f"the consumer groups of stream {key!r} have no consumer: nothing serves it"
        return ""

    @property
    def _list_ends(self) -> dict[str, ListEnd]:
        """The end consumers take from, of each list a subscription of this broker reads."""
        return {
            s.source.key: s.source.pop
            for s in self.broker.subscriptions
            if isinstance(s.source, RedisList)
        }

    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        if isinstance(source, RedisList):
            return self._open_list(source, options, label=label)
        if isinstance(source, RedisChannel):
            count = read_count_option(options, DEFAULT_COUNT)
            return ChannelSubscription(self.client, source, label=label, count=count)
        if not isinstance(source, RedisStream):
            raise ConfigurationError(f"{label}: a Redis broker cannot read {source!r}")
        if source.mode is not Mode.GROUP:
            return PlainSubscription(
                self.client,
                source,
                label=label,
                count=read_count_option(options, DEFAULT_COUNT),
                block_ms=_block_option(options),
            )
        return GroupSubscription(
            self.client,
            source,
            label=label,
            count=read_count_option(options, DEFAULT_COUNT),
            block_ms=_block_option(options),
            consumer=source.consumer,  # None: a stable default, leased at open (names.py)
            atomic_dead_letter=lambda destination: self.broker.same_slot(source.key, destination),
            window=bool(options.get("pipeline")),
            atomic=bool(options.get("atomic")),
            segment_check=self._segment_check(source, options, label=label),
        )

    def _segment_check(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> CommandCheck | None:
        """The broker's segment check, consulting this connection's server table."""
        client = self.client
        return self.broker._segment_check(
            source, options, label=label, commands=lambda: client.commands
        )

    def _open_list(
        self, source: RedisList, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        count = read_count_option(options, DEFAULT_COUNT)
        block_ms = _block_option(options)

        def same_slot(destination: str) -> bool:
            return self.broker.same_slot(source.key, destination)

        if not source.reliable:
            return SimpleListSubscription(
                self.client, source, label=label, count=count, block_ms=block_ms,
                same_slot=same_slot,
            )  # fmt: skip
        return ReliableListSubscription(
            self.client,
            source,
            label=label,
            count=count,
            block_ms=block_ms,
            # Its own name by default: a processing list is one subscription's, never shared.
            consumer=source.consumer or f"{default_consumer()}-{next(_list_consumers)}",
            same_slot=same_slot,
            window=bool(options.get("pipeline")),
            atomic=bool(options.get("atomic")),
            segment_check=self._segment_check(source, options, label=label),
        )
