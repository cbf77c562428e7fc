"""``FileBroker``: subscriptions and publishers on a SeaStreamer stream file, with no server.

- **Publishing** appends through the process's one writer of the file (``writers.acquire``),
  taken at the first publish and kept until the app stops, and writes the message out at once,
  so followers in this process and others see it as soon as ``publish`` returns; it reaches the
  disk as the broker's ``durability`` says (:mod:`.durability`; with ``"interval"`` the
  transport runs the writer's background sync in its nursery until the app stops). Other
  processes (and other apps of this one) may write the same file meanwhile: each append takes
  the file's lock for just that append and continues after what the others wrote (see
  :mod:`.writer`), so sequence numbers stay dense per stream whoever writes.
- **Subscriptions** each read through their own ``FileSource`` (one inotify watch per file is
  shared). Only a publish creates the file: a replay of a missing file is refused at start, a
  live subscription waits for the file to appear and then reads it from its first message.
  The subscription's driver task is the only one that reads and seeks; a seek runs to
  completion in bounded steps, shielded by the driver.
- **Settling**: ack and drop settle nothing (positions are the reader's own). ``retry`` appends
  a copy with ``x-ruststream-retry-count`` advanced; ``retry_after`` waits on the core's Trio
  timer, then appends. Dead letters are published to their key of the same file.
- **Headers** travel in the ``rs1:``/``rs2:`` envelope (see :mod:`.envelope`); a message without
  headers is written verbatim.
- **Resumable consumers** (``durable="name"``) keep a watermark beside the file (see
  :mod:`.durable`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..core.broker import Broker
from ..core.delivery import (
    Delivery,
    ReadBatch,
    SequenceDelivery,
    attempt_from_headers,
    retry_headers,
)
from ..core.description import BrokerDescription
from ..core.destinations import Destination
from ..core.errors import ConfigurationError
from ..core.group_moves import GroupMove, GroupNotFound, PositionRefused
from ..core.groups import open_nursery
from ..core.host import SubscriptionHost
from ..core.names import NameNotFound
from ..core.outcome import Outcome, OutcomeKind
from ..core.positions import Position, PositionKind
from ..core.process import process_name
from ..core.requests import new_correlation_id
from ..core.routing import BY_STREAM, Declared
from ..core.schedule import FairShare
from ..core.transport import (
    SeekRefused,
    Source,
    SubscriptionSource,
    Transport,
    read_count_option,
    settles_with,
)
from ..memory.broker import MemoryTransport
from ..memory.group_moves import move_memory_group
from .durability import DEFAULT_DURABILITY, Durability, check_durability
from .durable import (
    PERSIST_EVERY,
    PERSIST_INTERVAL,
    DurableStateError,
    DurableStore,
    StoredPosition,
    Watermark,
    consumer_name_of,
    drop_lock,
    take_lock,
)
from .envelope import PREFIXES, STORAGE_HEADERS, open_envelope, seal
from .errors import SeekError, StreamFileNotFoundError, StreamKeyNotFoundError
from .follower import MAX_BACKOFF_MS, MIN_BACKOFF_MS, FileSource
from .format import DEFAULT_BEACON_INTERVAL, HEADER_SIZE, Message
from .group import FileGroupSubscription, seek_key
from .group_store import GroupLockedError
from .keys import check_file_keys
from .positions import format_position
from .reader import FileReader
from .sources import FileStream, check_stream_key
from .watch import watches
from .writer import WriterHandle, writers

__all__ = ["DEFAULT_COUNT", "FileBroker", "FileSubscription", "FileTransport"]

#: Messages taken per read unless the subscription says ``count=``.
DEFAULT_COUNT = 64

_SEQUENCE = PositionKind.SEQUENCE
_RETRIES = frozenset({OutcomeKind.RETRY, OutcomeKind.RETRY_AFTER})
_NO_HEADERS: Mapping[str, str] = {}
_log = logging.getLogger("trio_streams.file")


class FileBroker(Broker):
    """A stream file as a broker.

    ``path`` is created (with ``beacon_interval``) by the first publish, never by a
    subscription: a replay of a missing file is a ``StreamFileNotFoundError`` at start (a
    mistyped path is named, not read as an empty file), and a live subscription waits for a
    writer to create it. With ``existing_only``, a missing file is refused when the app
    connects.
    With ``end_with_eos``, a broker that published writes an end-of-stream message when the app
    stops, so replays of the file end there. ``durable_interval`` is how often, at most, a
    resumable consumer stores its position while it moves (seconds; see :mod:`.durable`).

    ``durability`` is what a publish promises if the machine loses power (a killed process loses
    nothing published, whatever the setting):

    - ``"publish"``: ``publish`` returns once the message is on disk (one sync per publish).
    - ``"interval"`` (the default): a published message is on disk at most ``sync_interval``
      seconds (default 1) after ``publish`` returned; a background task of the connection syncs,
      never more often than that, and only after writes.
    - ``"close"``: only the app's stop syncs.

    A bad setting raises :class:`~trio_streams.file.durability.DurabilitySettingError` (a
    ``ConfigurationError``) naming the parameter. Brokers and publishers of one file in one
    process share its writer, which keeps the strongest setting any of them asked for.

    Subscriber option: ``count`` — messages taken per read (default 64).
    """

    source_types = (FileStream,)
    subscriber_options = frozenset({"count"})
    kind = "file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        existing_only: bool = False,
        end_with_eos: bool = False,
        beacon_interval: int = DEFAULT_BEACON_INTERVAL,
        durable_interval: float = PERSIST_INTERVAL,
        durability: Durability = DEFAULT_DURABILITY,
        sync_interval: float | None = None,
        name: str | None = None,
        prefix: str = "",
        **defaults: Any,
    ) -> None:
        super().__init__(name=name or f"file {os.fspath(path)!r}", prefix=prefix, **defaults)
        self.path = os.fspath(path)
        self.existing_only = existing_only
        self.end_with_eos = end_with_eos
        self.beacon_interval = beacon_interval
        if isinstance(durable_interval, bool) or not isinstance(durable_interval, int | float):
            raise ConfigurationError(f"durable_interval takes seconds, not {durable_interval!r}")
        if not 0 <= durable_interval < float("inf"):
            raise ConfigurationError(f"durable_interval must be >= 0 s, got {durable_interval!r}")
        self.durable_interval = float(durable_interval)
        self.durability, self.sync_interval = check_durability(durability, sync_interval)

    def description(self) -> BrokerDescription:
        """Its server is its stream file (protocol ``file``); no bindings."""
        return BrokerDescription(
            kind=self.kind,
            system="trio_streams.file",
            server={
                "host": "localhost",
                "protocol": "file",
                "pathname": "/" + self.path.lstrip("/"),
                "description": f"the stream file {self.path} (SeaStreamer format)",
            },
        )

    def source_for(self, name: str) -> FileStream:
        """A plain name is ``FileStream(name, durable=True)``: a resumable consumer of the key
        ``name``, named after the app and subscription that run it — from the tip the first
        time, resuming where it stopped after a restart, as a Redis group does."""
        return FileStream(name, durable=True)

    def check_subscription(self, source: Source, options: Mapping[str, Any]) -> None:
        super().check_subscription(source, options)
        _check_count(options)

    def prepare(self, declared: Declared) -> None:
        """An ordered group member is handled in lanes keyed by stream key (a retry is handled
        again in place, so the key's order holds); it refuses ``by_key`` and ``batch``, which
        would order it otherwise."""
        source = declared.source
        if not isinstance(source, FileStream) or not source.ordered:
            return
        options = declared.options
        for name in ("by_key", "batch"):
            if getattr(options, name) is not None:
                raise ConfigurationError(
                    f"handler {declared.name}: {source!r} is ordered by stream key, so it "
                    f"cannot take {name}= (lanes keyed otherwise, or batches, would break "
                    "the order)"
                )
        declared.options = dataclasses.replace(options, by_key=BY_STREAM)

    async def set_group_position(
        self, group: str, position: Position, *, dry_run: bool = False
    ) -> GroupMove:
        """Move consumer group ``group`` of this file to ``position``, for all its members:
        ``Position.beginning()``, ``Position.end()``, ``Position.sequence(n, stream=key)`` (that
        message is delivered next) or ``Position.timestamp(ms)`` (the first message strictly after
        it). Refused while a member of the group is live (``GroupLockedError``: a member's own
        handler may move it while it is alone, with ``ctx.seeker``); what members took and did
        not settle, and delayed retries, stay as they are. ``dry_run=True`` moves nothing and
        says what the move would skip or replay (see :func:`.groups.move_group`).

        Under ``app.test()`` it moves the in-process group, with the same refusals."""
        if not isinstance(position, Position):
            raise TypeError(f"position must be a Position, not {type(position).__name__}")
        transport = self._transport
        if isinstance(transport, MemoryTransport):
            await trio.lowlevel.checkpoint()
            keys = self._group_keys(group)
            if len(keys) != 1:
                raise PositionRefused(
                    f"group {group!r} reads {len(keys)} keys; under app.test() a group of one "
                    "key moves"
                )
            members = transport.hub.find_group(keys, group)
            if members is not None and members.names:
                raise GroupLockedError(
                    f"group {group!r} has live members ({', '.join(sorted(members.names))}): "
                    "a group moves while its members are stopped (a member alone moves it with "
                    "its handler's ctx.seeker)",
                    path=self.path,
                )
            return move_memory_group(transport.hub, keys[0], group, position, dry_run=dry_run)
        from .groups import move_group  # the tools' module, imported when first needed

        return await trio.to_thread.run_sync(
            lambda: move_group(self.path, group, position, dry_run=dry_run)
        )

    def _group_keys(self, group: str) -> tuple[str, ...]:
        for subscription in self.subscriptions:
            source = subscription.source
            if isinstance(source, FileStream) and source.group_name == group:
                return source.with_prefix(self.prefix).keys
        raise GroupNotFound(f"{self.path}: no subscription of this app is in group {group!r}")

    def check_name(self, destination: Destination) -> None:
        super().check_name(destination)
        try:
            check_stream_key(destination.name)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.name}: {exc}") from None

    def reply_address(self) -> str:
        """A reply key of the same file, ``trio-streams.reply.<id>``: requests and their replies
        are both kept in the file, in order (what tools and tests want to look at)."""
        return f"trio-streams.reply.{new_correlation_id()[:12]}"

    def reply_source(self, address: str) -> Source:
        """The live tail of the reply key."""
        return FileStream(address)

    def reply_destination(self, address: str) -> Destination:
        """The reply key, checked: a request's reply-to must name a key the format holds."""
        destination = Destination.stream(address)
        self.check_name(destination)
        return destination

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        await trio.lowlevel.checkpoint()
        if self.existing_only:
            _check_exists(self.path)
        async with open_nursery() as nursery:
            transport = FileTransport(
                self.path,
                published=self.published_keys(),
                beacon_interval=self.beacon_interval,
                end_with_eos=self.end_with_eos,
                durable_interval=self.durable_interval,
                durability=self.durability,
                sync_interval=self.sync_interval,
                nursery=nursery,
            )
            try:
                yield transport
            finally:
                with trio.CancelScope(shield=True):
                    await transport.aclose()

    def published_keys(self) -> frozenset[str]:
        """The keys this broker's app publishes to: its publishers' and its dead letters'.

        A replay of one of them may find it empty at start (the app writes it later)."""
        keys = {publisher.full_destination for publisher in self.all_publishers()}
        for subscription in self.subscriptions:
            dead_letter = subscription.options.policy.dead_letter
            if dead_letter is not None:
                keys.add(dead_letter)
        return frozenset(keys)


def _check_exists(path: str) -> None:
    """``existing_only``: refuse a missing file at connect, before anything reads or writes."""
    if not os.path.exists(path):
        raise StreamFileNotFoundError(
            "no such stream file, and the broker has existing_only=True: check the path, or "
            "leave existing_only out so the broker creates the file at its first publish",
            path=path,
        )


def _holds_header(path: str) -> bool:
    """Whether ``path`` exists with at least a whole header (its writer has created it)."""
    try:
        return os.stat(path).st_size >= HEADER_SIZE
    except FileNotFoundError:
        return False


def _check_count(options: Mapping[str, Any]) -> int:
    return read_count_option(options, DEFAULT_COUNT)


class FileTransport(Transport):
    """A connected ``FileBroker``: the shared writer (once needed) and the open subscriptions.

    With ``durability="interval"`` and a ``nursery``, opening the writer starts its background
    sync there (:meth:`~.writer.StreamWriter.keep_synced`); :meth:`aclose` stops it, waiting
    for a sync under way, before closing the writer. Without a nursery, the writer syncs at its
    first write-out ``sync_interval`` seconds after the last sync, and at close.
    """

    def __init__(
        self,
        path: str,
        *,
        published: Collection[str] = (),
        beacon_interval: int = DEFAULT_BEACON_INTERVAL,
        end_with_eos: bool = False,
        durable_interval: float = PERSIST_INTERVAL,
        durability: Durability = DEFAULT_DURABILITY,
        sync_interval: float | None = None,
        nursery: trio.Nursery | None = None,
    ) -> None:
        self.path = path
        self.durability, self.sync_interval = check_durability(
            durability, sync_interval if durability == "interval" else None
        )
        self._nursery = nursery
        #: The background sync's scope, and its end (None: not started).
        self._syncing: tuple[trio.CancelScope, trio.Event] | None = None
        #: Keys the app publishes to: a replay of one is not refused for finding it empty.
        self.published = frozenset(published)
        self.durable_interval = durable_interval
        self._beacon_interval = beacon_interval
        self._end_with_eos = end_with_eos
        self._writer: WriterHandle | None = None
        self._keys: set[str] = set()
        self._subscriptions: set[FileSubscription] = set()
        self._share = FairShare()
        self._closed = False

    # ---- publishing --------------------------------------------------------------------------

    async def publish(
        self, destination: str, payload: bytes, headers: Mapping[str, str]
    ) -> Position:
        """Append and write out one message; returns its position (``sequence(seq, stream=key)``).

        Cancellable until the file's lock is taken (while another writer appends), so a
        cancelled publish appended nothing."""
        await trio.lowlevel.checkpoint_if_cancelled()
        seq, _ = await self.append(destination, payload, headers)
        await self._share.after_progress()
        return Position(_SEQUENCE, seq, destination)

    async def append(self, key: str, payload: bytes, headers: Mapping[str, str]) -> tuple[int, int]:
        """Append and write out one message now; returns its (sequence number, frame offset).

        Cancellable while it waits for the file's lock; a cancelled call appended nothing."""
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if key not in self._keys:
            check_stream_key(key)
            self._keys.add(key)
        writer = self._writer if self._writer is not None else self._open_writer()
        receipt = await writer.apublish(key, seal(payload, headers))
        return receipt.seq, receipt.offset

    def _open_writer(self) -> WriterHandle:
        if self._closed:
            raise trio.ClosedResourceError(f"the connection to {self.path} is closed")
        self._writer = writers.acquire(
            self.path,
            beacon_interval=self._beacon_interval,
            durability=self.durability,
            sync_interval=self.sync_interval if self.durability == "interval" else None,
        )
        if self.durability == "interval" and self._nursery is not None:
            scope, done = self._syncing = trio.CancelScope(), trio.Event()
            self._nursery.start_soon(self._keep_synced, self._writer, scope, done)
        return self._writer

    @staticmethod
    async def _keep_synced(writer: WriterHandle, scope: trio.CancelScope, done: trio.Event) -> None:
        """The writer's background sync, until :meth:`aclose` cancels ``scope``."""
        try:
            with scope:
                await writer.keep_synced()
        finally:
            done.set()

    # ---- subscribing -------------------------------------------------------------------------

    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> FileSubscription | FileGroupSubscription:
        if not isinstance(source, FileStream):
            raise ConfigurationError(f"{label}: a stream file cannot read {source!r}")
        if source.group_name is not None:
            return FileGroupSubscription(
                self.path, source, label=label, count=_check_count(options)
            )
        subscription = FileSubscription(self, source, label=label, count=_check_count(options))
        self._subscriptions.add(subscription)
        return subscription

    def _forget(self, subscription: FileSubscription) -> None:
        self._subscriptions.discard(subscription)

    async def aclose(self) -> None:
        """Close what is still open: subscriptions never run, then the writer (fsync, EOS)."""
        self._closed = True
        for subscription in list(self._subscriptions):
            await subscription.aclose()
        syncing, self._syncing = self._syncing, None
        if syncing is not None:
            scope, done = syncing
            scope.cancel()
            await done.wait()  # a sync under way finishes before the writer closes
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.aclose(eos=self._end_with_eos)
        else:
            await trio.lowlevel.checkpoint()


class FileSubscription(SubscriptionSource):
    """One subscription's reader over the file: deliveries, seeks, retry copies, its watermark."""

    seekable = True
    durable_delay = False

    def __init__(
        self, transport: FileTransport, stream: FileStream, *, label: str, count: int
    ) -> None:
        self._transport = transport
        self._label = label
        #: What retry copies name as their target; known at open (None: no target).
        self._retry_target: str | None = None
        self._count = count
        self.read_count = count
        self._keys = stream.keys
        #: The durable consumer's name (True: named at open, after the app and subscription).
        self._durable = stream.durable
        self.live = not stream.replaying
        self.path = transport.path
        #: Offset of the first retry copy appended since a replay last ended (None: none).
        self._appended_from: int | None = None
        self._store: DurableStore | None = None
        #: A durable consumer's lock, held while it waits for its file to be created (a
        #: second copy is refused at its start, not once the file appears).
        self._early_lock: int | None = None
        self._watermark: Watermark | None = None
        self._saved_at = float("-inf")  # the first move is saved at once
        #: The stored message a resumed consumer skips (it settled before the restart).
        self._skip: tuple[str, int, int] | None = None
        self._stream = stream
        self._closed = False
        #: The reader, once the file exists (a live subscription may wait for it, see ``read``).
        self._source: FileSource | None = None
        #: The last read returned a batch of a live subscription (see ``read``).
        self._handed_over = False
        # Open now, not at the first read: a live subscription starts at the tip as it is when
        # the app starts, before anything is published. A consumer named after its app opens
        # at ``open``, which knows the app (still before anything is published).
        if stream.durable is not True:
            self._start()

    def _start(self) -> None:
        """Open the reader where the subscription starts (see :meth:`_open`); a live
        subscription of a file not there yet waits for it (see :meth:`read`)."""
        stream, label = self._stream, self._label
        try:
            if stream.replaying:
                self._check_replayed_keys()
            self._source = self._open(at_tip=not stream.replaying)
        except StreamFileNotFoundError as exc:
            if os.path.lexists(self.path):
                raise  # there, but not a stream file that can be read: a directory, say
            if stream.replaying:
                raise StreamFileNotFoundError(
                    f"no such stream file to replay ({label}): check the path", path=self.path
                ) from exc
            if isinstance(stream.durable, str):
                self._early_lock = take_lock(self.path, stream.durable)
            self.starts = (
                "waiting for the file to be created, then reading it from its first message"
            )
            _log.info(
                "%s: %s does not exist yet; waiting for a writer to create it, then reading "
                "it from its first message",
                label,
                self.path,
            )

    def _check_replayed_keys(self) -> None:
        """Refuse a replay of a key the file has no message of, unless the app publishes to it:
        it would end at once having handled nothing (a mistyped key, most often). Costs what
        :func:`~.keys.check_file_keys` says: beacons, then messages only until the key is seen."""
        unpublished = [key for key in self._keys if key not in self._transport.published]
        try:
            check_file_keys(self.path, unpublished)
        except NameNotFound as exc:
            raise StreamKeyNotFoundError(
                f"{self._label}: cannot replay: {exc}", path=self.path, missing=exc.missing
            ) from None

    def _open(self, *, at_tip: bool) -> FileSource:
        """The source over the file (which must exist), where the subscription starts: at the
        tip (``at_tip``), at the beginning, or where ``start_at`` or a stored watermark say."""
        stream = self._stream
        reader = FileReader(
            self.path,
            keys=stream.keys,
            on_eos="stop" if stream.replaying else "hold",
            start=Position.end() if at_tip else None,
        )
        store: DurableStore | None = None
        try:
            if isinstance(stream.durable, str):
                lock, self._early_lock = self._early_lock, None
                store = DurableStore(
                    self.path,
                    stream.durable,
                    file_created_at_ms=reader.header.created_at_ms,
                    lock_fd=lock,
                )
                self._resume(reader, store)
            # start_at only applies to a durable consumer's first start.
            if self._watermark is None and stream.start_at is not None:
                self._start_at(reader, stream.start_at)
            if store is not None and self._watermark is None:
                # First start: remember where, so a restart before anything settles resumes
                # here and not at a later tip.
                self._watermark = Watermark(StoredPosition.at_offset(reader.offset))
                store.save(self._watermark.committed)
            source = FileSource(
                reader,
                "replay" if stream.replaying else "live",
                watches.acquire(reader.path),
                watches,
            )
        except BaseException:
            reader.close()
            if store is not None:
                store.close()
            raise
        self._store = store
        return source

    async def _wait_for_file(self) -> FileSource:
        """A live subscription of a file that did not exist at start: wait for a writer to
        create it (looking every 1 ms at first, doubling to 1024 ms), then read it from its
        first message, as everything in it was written after the start. Cancelling the wait
        loses nothing: nothing is open until the file is there."""
        backoff_ms = MIN_BACKOFF_MS
        while (source := self._open_if_created()) is None:
            await trio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, MAX_BACKOFF_MS)
        self._source = source
        _log.info("%s: %s created; following it", self._label, self.path)
        return source

    def _open_if_created(self) -> FileSource | None:
        """The source from the file's first message, once a writer has created the file (its
        header is whole); None while it is not there."""
        if not _holds_header(self.path):
            return None
        try:
            return self._open(at_tip=False)
        except StreamFileNotFoundError:
            if os.path.lexists(self.path):
                raise  # there, but not a stream file that can be read
            return None  # removed again meanwhile

    def _resume(self, reader: FileReader, store: DurableStore) -> None:
        """Start after the stored watermark, or where the consumer first started."""
        stored = store.stored
        if stored is None:
            return
        self._watermark = Watermark(stored)
        if stored.offset is not None:
            if stored.offset > reader.file_size():
                raise DurableStateError(
                    f"{self._label}: consumer {store.name!r} starts at byte {stored.offset}, past "
                    f"the end of the file; remove {store.path} to start over",
                    path=self.path,
                )
            reader.rewind_to(stored.offset)
            return
        assert stored.stream is not None and stored.sequence is not None
        try:
            reader.seek(
                Position.sequence(stored.sequence, stream=stored.stream),
                key=stored.stream,
                shard=stored.shard,
            )
        except SeekError as exc:
            raise DurableStateError(
                f"{self._label}: consumer {store.name!r} stopped after sequence "
                f"{stored.sequence} of stream {stored.stream!r}, which this file does not hold "
                f"({_why(exc)}); remove {store.path} to start over",
                path=self.path,
            ) from exc
        self._skip = (stored.stream, stored.shard or 0, stored.sequence)

    def _start_at(self, reader: FileReader, position: Position) -> None:
        try:
            reader.seek(position, key=self._seek_key(position), shard=position.shard)
        except SeekError as exc:
            raise SeekRefused(
                f"{self._label}: start_at {position!r} refused in {self.path}: {_why(exc)}"
            ) from exc

    # ---- reading -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        if self._durable is None:
            # Every process running this app reads the whole file (files have no consumer
            # groups): a copy this one asks for names this process, so another replica passes
            # over it. A resumable consumer's copies name it alone: its next run, in another
            # process, handles the copies this one left.
            host.retry_target = f"{host.retry_target}@{process_name()}"
        elif self._durable is True:
            # Named after the app and subscription (``<app>/<subscription>``, unique in the
            # app), which only the running app knows.
            name = consumer_name_of(host.retry_target)
            self._durable = name
            self._stream = self._stream.evolve(durable=name)
            self._start()
            if self.starts is None:  # the banner names the consumer, not "durable=True"
                start_at = self._stream.start_at
                if start_at is not None:
                    first = f"from {start_at!r}"
                else:
                    first = "from the beginning" if self._stream.replaying else "from the tip"
                self.starts = f"resuming durable consumer {name!r} where it stopped"
                self.starts += f" (the first time: {first})"
        self._retry_target = host.retry_target
        await trio.lowlevel.checkpoint()

    def poll(self) -> Sequence[Delivery]:
        source = self._source
        if source is None or self._handed_over:
            # Not there yet; or the last read handed a batch over: ``read`` looks again once
            # the handler had its turn (unknown, as far as ``poll`` says).
            return ()
        messages = source.read_available(self._count)
        if not messages:
            if self._appended_from is None or not source.ended:
                return ()
            # Retry copies were appended after this replay reached its end: read them too.
            source.resume(self._appended_from)
            self._appended_from = None
            messages = source.read_available(self._count)
            if not messages:
                return ()
        if self._skip is not None:
            first = messages[0]
            if (first.stream_key, first.shard, first.seq) == self._skip:
                messages = messages[1:]
            self._skip = None
        return self._deliveries(messages)

    def _deliveries(self, messages: list[Message]) -> Sequence[Delivery]:
        watermark = self._watermark
        if watermark is None:
            # Made deliveries as they are taken: most are handed to a handler as a payload.
            return ReadBatch(messages, _delivery_of, _PAYLOAD_AT, PREFIXES)
        deliveries = [_delivery_of(message) for message in messages]
        for delivery in deliveries:
            delivery.handle = watermark.track(delivery)
        return deliveries

    async def read(self) -> Sequence[Delivery] | None:
        # Nothing is held across a checkpoint here: a cancelled read loses nothing.
        source = self._source if self._source is not None else await self._wait_for_file()
        if self._handed_over:
            # The last read handed a batch over (live): the handler's task was made runnable by
            # the hand-over. Give it the turn before looking at the file again and going back
            # to wait on it: two schedule points put this task behind it whichever order the
            # scheduler runs them in.
            self._handed_over = False
            await trio.lowlevel.checkpoint()
            await trio.lowlevel.checkpoint()
        while True:
            batch = self.poll()
            if batch:
                self._handed_over = self.live
                return batch
            if source.ended:
                await trio.lowlevel.checkpoint()
                return None
            if self._watermark is not None:
                self._save_if_due()
            await source.wait()

    def unread(self) -> int:
        return 0

    def lag(self) -> tuple[str, float] | None:
        """Bytes of the file this subscription has not read yet (an ``fstat``)."""
        source = self._source
        if source is None or self._closed:
            return None
        reader = source._reader
        return ("bytes", float(max(0, reader.file_size() - source.offset)))

    # ---- seeking -----------------------------------------------------------------------------

    async def seek(self, position: Position) -> None:
        if self._closed:
            raise SeekRefused(f"{self._label}: the subscription's reader is closed")
        if self._source is None:
            raise SeekRefused(f"{self._label}: {self.path} does not exist yet: nothing to seek in")
        key = self._seek_key(position)
        try:
            offset = await self._source.seek(position, key=key, shard=position.shard)
        except SeekError as exc:
            raise SeekRefused(
                f"{self._label}: seek to {format_position(position)} in {self.path}"
                f"{'' if key is None else f' (stream {key!r})'} refused: {_why(exc)}"
            ) from exc
        # Whatever was read or appended before the seek belongs to the old position.
        self._appended_from = None
        self._skip = None
        if self._watermark is not None:
            # The stored position follows the seek at once: a restart resumes where the handler
            # moved the reader (nothing after it skipped, nothing it skipped read again).
            self._watermark.restart(StoredPosition.at_offset(offset))
            self._save_now()

    def _seek_key(self, position: Position) -> str | None:
        return seek_key(self._label, self._keys, position)

    # ---- settling ----------------------------------------------------------------------------

    @property
    def acks_are_noops(self) -> bool:
        # Without a durable consumer an ack moves nothing: no watermark, no copy. (A durable
        # one has its watermark from when the file is open, which may be later, not from now.)
        return self._durable is None and settles_with(self, _FILE_SETTLE)

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        if outcome.kind in _RETRIES:
            _, offset = await self._transport.append(
                delivery.stream, delivery.payload, retry_headers(delivery, self._retry_target)
            )
            if not self.live and (self._appended_from is None or offset < self._appended_from):
                self._appended_from = offset
        # No checkpoint between the copy and the watermark: a cancellation cannot come between.
        watermark = self._watermark
        if watermark is not None and watermark.settled(delivery.handle):
            self._save_if_due()

    def _save_if_due(self) -> None:
        watermark = self._watermark
        assert watermark is not None
        if watermark.moved >= PERSIST_EVERY or (
            watermark.moved
            and trio.current_time() - self._saved_at >= self._transport.durable_interval
        ):
            self._save_now()

    def _save_now(self) -> None:
        watermark = self._watermark
        assert watermark is not None and self._store is not None
        self._store.save(watermark.committed)
        watermark.moved = 0
        self._saved_at = trio.current_time()

    # ---- closing -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        self._transport._forget(self)
        if self._early_lock is not None:  # the file never came: nothing to keep beside it
            lock, self._early_lock = self._early_lock, None
            assert isinstance(self._stream.durable, str)
            drop_lock(self.path, self._stream.durable, lock)
        store = self._store
        try:
            if self._source is not None:
                await self._source.aclose()
            else:
                await trio.lowlevel.checkpoint()
        finally:
            if store is not None:
                try:
                    assert self._watermark is not None
                    committed = self._watermark.committed
                    await trio.to_thread.run_sync(lambda: store.save(committed, sync=True))
                finally:
                    store.close()

    def __repr__(self) -> str:
        return f"<FileSubscription {self._label!r} on {self.path!r} keys={list(self._keys)}>"


def _delivery_of(message: Message) -> Delivery:
    """The delivery of a message read from the file."""
    key, shard, seq, timestamp_ms, payload, _offset = message
    # The values come from a checked frame, no need to validate them again. Shard 0 is left
    # unnamed, so the position (built when first read) equals
    # ``FilePosition.sequence(seq, stream=key)``.
    if payload.startswith(PREFIXES):
        payload, headers = open_envelope(payload)
        if headers and not STORAGE_HEADERS.isdisjoint(headers):
            headers = {k: v for k, v in headers.items() if k not in STORAGE_HEADERS}
        attempt = attempt_from_headers(headers) if headers else 1
        return SequenceDelivery(key, payload, headers, seq, shard or None, attempt, timestamp_ms)
    return SequenceDelivery(key, payload, _NO_HEADERS, seq, shard or None, 1, timestamp_ms)


#: Where a decoded message holds its payload (``Message.payload``).
_PAYLOAD_AT = Message._fields.index("payload")


#: The settle ``acks_are_noops`` speaks for (a subclass or a wrapper may replace it).
_FILE_SETTLE = FileSubscription.settle


def _why(error: SeekError) -> str:
    return error.reason.removeprefix("seek refused: ")
