"""Pub/Sub subscriptions: SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE as an async iterator.

A subscription owns one connection, outside any pool, and reads it only while the caller
iterates, so it needs no background task and its back-pressure is the caller's pace. Messages
arrive as RESP3 push frames (or RESP2 arrays on old servers).

Pub/Sub is fire-and-forget: messages published while the connection is down are gone. So when
the connection is lost the subscription reconnects (capped, jittered backoff), subscribes again
to everything, and yields a :class:`Gap` before the next message, saying how long it was deaf
and why. A caller that cannot tolerate gaps learns of each one; nothing is silently papered over.
A server that hangs without closing the connection is found by a health check (a ``PING`` after
a silence) and handled the same way.

A server also drops a subscriber that falls behind (``client-output-buffer-limit pubsub``), and
that drop gives no sign before the subscriber has read everything it was sent before it: a
caller that reads at its own slow pace would learn of it only much later, and would then report
a gap of a few milliseconds where it missed everything since the drop. :meth:`Subscription.watch`
(a task the caller runs) probes the connection while the caller is busy, reports such a drop
within two health-check intervals, measured from before it happened, and subscribes again at
once; what the dropped connection received is still delivered, before the gap.

Commands on the connection are answered in order, so the subscription keeps the commands it sent
and matches each confirmation, PONG or error to the oldest: a refused ``subscribe(...)`` raises
at the call, and what :attr:`Subscription.channels` lists is what the server confirmed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, final

import trio

from .backoff import Backoff
from .connection import Connection
from .errors import (
    CommandEncodingError,
    RedisConnectionError,
    RedisError,
    RedisTimeoutError,
    ReplyError,
)
from .keys import key_slot
from .protocol import NEED_DATA, PushFrame, pack_command


@final
@dataclass(frozen=True, slots=True)
class Message:
    """One published message."""

    #: ``message`` (SUBSCRIBE), ``pmessage`` (PSUBSCRIBE) or ``smessage`` (SSUBSCRIBE).
    kind: Literal["message", "pmessage", "smessage"]
    channel: bytes
    data: bytes
    #: The pattern that matched, for ``pmessage``.
    pattern: bytes | None = None


@final
@dataclass(frozen=True, slots=True)
class Gap:
    """The subscription was disconnected from ``lost_at`` to ``resumed_at`` (Trio clock
    seconds): messages published in between were not received."""

    error: RedisError
    lost_at: float
    resumed_at: float
    #: Connection attempts it took to resubscribe.
    attempts: int


#: The confirmation each subscription command sends per name, and the group it changes.
_GROUPS = {
    b"subscribe": "channels",
    b"unsubscribe": "channels",
    b"psubscribe": "patterns",
    b"punsubscribe": "patterns",
    b"ssubscribe": "shard",
    b"sunsubscribe": "shard",
}
_KIND = {b"message": "message", b"pmessage": "pmessage", b"smessage": "smessage"}
#: What a health-check PING carries, so its answer is told apart in RESP2 (``[pong, token]``).
_PING_TOKEN = b"trio-streams-health"


def _as_bytes(name: str | bytes) -> bytes:
    """A channel or pattern name as bytes; ``CommandEncodingError`` for anything else."""
    if isinstance(name, bytes):
        return name
    if isinstance(name, str):
        try:
            return name.encode()
        except UnicodeEncodeError:
            raise CommandEncodingError(
                f"a channel name is not valid Unicode (a lone surrogate?): {name!r}"
            ) from None
    raise CommandEncodingError(f"a channel name is bytes or str, not {type(name).__name__}")


def _message(frame: Any) -> Message | None:
    """The published message ``frame`` carries, or None for any other frame."""
    if not isinstance(frame, list) or not frame:
        return None
    kind = frame[0]
    if kind == b"message" or kind == b"smessage":
        return Message(_KIND[kind], frame[1], frame[2])  # type: ignore[arg-type]
    if kind == b"pmessage":
        return Message("pmessage", frame[2], frame[3], frame[1])
    return None


def _describe(command: bytes, names: Sequence[bytes]) -> str:
    """``SUBSCRIBE news, orders`` (channel names are not secrets; long lists are cut)."""
    listed = ", ".join(n.decode("utf-8", "replace") for n in names)
    if len(listed) > 200:
        listed = listed[:200] + "..."
    return f"{command.decode().upper()} {listed}"


def _by_slot(command: bytes, names: list[bytes]) -> list[list[bytes]]:
    """The commands ``names`` take: one for classic channels and patterns; for shard channels
    one per hash slot, as a cluster serves ``SSUBSCRIBE``/``SUNSUBSCRIBE`` of one slot only
    (``CROSSSLOT`` otherwise, even when one node owns both slots)."""
    if command not in (b"ssubscribe", b"sunsubscribe"):
        return [names]
    slots: dict[int, list[bytes]] = {}
    for name in names:
        slots.setdefault(key_slot(name), []).append(name)
    return list(slots.values())


class _Request:
    """A command sent on the subscription's connection whose answer is still awaited: one
    confirmation per name (or one error) for a (un)subscribe, the PONG for a PING."""

    __slots__ = ("add", "command", "done", "error", "names", "remaining")

    def __init__(self, command: bytes, names: Sequence[bytes], *, add: bool) -> None:
        self.command = command
        self.names = list(names)
        self.add = add
        self.remaining = max(len(names), 1)
        self.done = False
        self.error: RedisError | None = None


class Subscription:
    """Messages of the subscribed channels, patterns and shard channels.

    Use ``async with client.subscribe(...) as sub: async for item in sub:``; items are
    :class:`Message` and, after a reconnect, :class:`Gap`. When ``async with`` returns, every
    initial subscription is confirmed by the server.

    A silent connection is checked: when nothing has arrived for ``health_check_interval``
    seconds while the caller waits for a message, a ``PING`` goes out, and if no answer
    comes within ``health_check_timeout`` seconds the server is taken for dead (hung, or
    unreachable without a reset): the connection is closed, and the iteration reconnects and
    yields a :class:`Gap` as for any other loss. ``health_check_interval=0`` turns it off.
    """

    def __init__(
        self,
        opener: Callable[[], Awaitable[Connection]],
        *,
        channels: Iterable[str | bytes] = (),
        patterns: Iterable[str | bytes] = (),
        shard_channels: Iterable[str | bytes] = (),
        backoff: Backoff,
        on_connection_lost: Callable[[], None] | None = None,
        on_lost: Callable[[RedisError], None] | None = None,
        on_resumed: Callable[[Gap], None] | None = None,
        health_check_interval: float = 5.0,
        health_check_timeout: float = 5.0,
    ) -> None:
        self._opener = opener
        #: Told once per loss, when it begins, with its cause (the :class:`Gap` that ends it
        #: follows in the iteration): a caller that must show it is deaf while reconnecting.
        self._on_lost = on_lost
        #: Told once per loss, when it is subscribed again, with the :class:`Gap` (which the
        #: iteration yields later, after what the lost connection still had to deliver).
        self._on_resumed = on_resumed
        self._wanted: dict[str, set[bytes]] = {
            "channels": {_as_bytes(c) for c in channels},
            "patterns": {_as_bytes(p) for p in patterns},
            "shard": {_as_bytes(s) for s in shard_channels},
        }
        self._backoff = backoff
        self._on_connection_lost = on_connection_lost
        self._connection: Connection | None = None
        #: When the current connection was subscribed (Trio clock).
        self._connected_at = 0.0
        #: A connection the server dropped, still delivering what it received before the
        #: drop; its messages come before anything of :attr:`_connection`.
        self._draining: Connection | None = None
        #: What the current connection delivered while one drains (the gap first).
        self._after_drain: deque[Message | Gap] = deque()
        #: The current connection, known dropped while another one drains: it drains next.
        self._doomed: Connection | None = None
        #: Set while a task subscribes again; the others wait for it.
        self._resubscribing: trio.Event | None = None
        self._ready: deque[Message | Gap] = deque()
        self._lost: tuple[RedisError, float] | None = None
        self._closed = False
        #: Commands sent and not yet answered, oldest first (the server answers in order).
        self._requests: deque[_Request] = deque()
        #: The health-check PING in flight, if any.
        self._ping: _Request | None = None
        #: Seconds spent waiting for a frame since the last one arrived (or the last PING).
        self._silence = 0.0
        self.health_check_interval = health_check_interval
        self.health_check_timeout = health_check_timeout
        # One task reads the connection at a time: the iteration, or a subscribe() call
        # waiting for its confirmation while nobody iterates.
        self._reading = False
        self._turn_over: trio.Event | None = None

    @property
    def channels(self) -> frozenset[bytes]:
        """Channels subscribed with SUBSCRIBE (confirmed by the server)."""
        return frozenset(self._wanted["channels"])

    @property
    def patterns(self) -> frozenset[bytes]:
        """Patterns subscribed with PSUBSCRIBE (confirmed by the server)."""
        return frozenset(self._wanted["patterns"])

    @property
    def shard_channels(self) -> frozenset[bytes]:
        """Channels subscribed with SSUBSCRIBE (confirmed by the server)."""
        return frozenset(self._wanted["shard"])

    @property
    def draining(self) -> bool:
        """Whether a connection the server dropped still delivers what it received before the
        drop: what the current connection delivers (the :class:`Gap` first) waits behind it."""
        return self._draining is not None

    @property
    def connection(self) -> Connection | None:
        """The current connection (None while reconnecting)."""
        return self._connection

    async def __aenter__(self) -> Self:
        self._connection = await self._connect(self._ready)
        self._connected_at = trio.current_time()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; iteration ends."""
        self._closed = True
        for connection in (self._connection, self._draining):
            if connection is not None:
                connection.close()
        self._connection = self._draining = None
        self._fail_requests(RedisConnectionError("the subscription is closed"))
        await trio.lowlevel.checkpoint()

    # -- changing what is subscribed --------------------------------------------------------

    async def subscribe(self, *channels: str | bytes) -> None:
        """Add channels; returns once the server confirmed them (they are then in
        :attr:`channels`, and their messages follow in the iteration).

        A refusal is raised here, typed (``NoPermissionError`` when the ACL user may not use a
        channel) and naming the channels; :attr:`channels` is then unchanged. If the
        connection is lost before the answer, :class:`~.errors.RedisConnectionError` is
        raised and the channels are not added. While the subscription is reconnecting, the
        channels are added at once and subscribed by the reconnect. Cancelling the wait
        leaves the outcome to the server: the channels are added if it confirms them.
        """
        await self._change(b"subscribe", channels, add=True)

    async def unsubscribe(self, *channels: str | bytes) -> None:
        """Remove channels; returns once the server confirmed (messages it sent before that
        are still delivered by the iteration)."""
        await self._change(b"unsubscribe", channels, add=False)

    async def psubscribe(self, *patterns: str | bytes) -> None:
        """Add patterns (as :meth:`subscribe`)."""
        await self._change(b"psubscribe", patterns, add=True)

    async def punsubscribe(self, *patterns: str | bytes) -> None:
        """Remove patterns."""
        await self._change(b"punsubscribe", patterns, add=False)

    async def ssubscribe(self, *channels: str | bytes) -> None:
        """Add shard channels (in a cluster they must live on this subscription's node)."""
        await self._change(b"ssubscribe", channels, add=True)

    async def sunsubscribe(self, *channels: str | bytes) -> None:
        """Remove shard channels."""
        await self._change(b"sunsubscribe", channels, add=False)

    async def _change(self, command: bytes, names: Iterable[str | bytes], *, add: bool) -> None:
        encoded = [_as_bytes(n) for n in names]
        if not encoded:
            return
        group = _GROUPS[command]
        if not add:
            self._wanted[group].difference_update(encoded)  # never subscribed again
        connection = self._connection
        if connection is None:  # reconnecting: the reconnect subscribes to what is wanted
            if add:
                self._wanted[group].update(encoded)
            await trio.lowlevel.checkpoint()
            return
        requests = [_Request(command, part, add=add) for part in _by_slot(command, encoded)]
        self._requests.extend(requests)
        try:
            await connection.send_raw(
                b"".join(pack_command((command, *r.names)) for r in requests),
                describe=_describe(command, encoded),
            )
        except RedisConnectionError as exc:
            self._mark_lost(exc)
        for request in requests:
            await self._wait_for(request, connection)

    async def _wait_for(self, request: _Request, connection: Connection) -> None:
        """Until ``request`` is answered: read the connection when no other task does (the
        messages read go to the iteration), or let the task that reads answer it."""
        while not request.done:
            if self._reading:  # the task reading answers it, or hands over the reading
                await self._turn_ended()
                continue
            self._reading = True
            try:
                if self._connection is not connection:  # lost (which answers every request)
                    if not request.done:
                        request.done = True
                        request.error = RedisConnectionError(
                            "connection lost before the server answered", address=connection.address
                        )
                    continue
                message = await self._read(connection)
                if message is not None:  # (found dropped meanwhile: it drains first)
                    into = self._ready if connection is self._draining else self._arrivals()
                    into.append(message)
            finally:
                self._end_turn()
        if request.error is not None:
            raise request.error

    async def _take_turn(self) -> None:
        while self._reading:
            await self._turn_ended()
        self._reading = True

    async def _turn_ended(self) -> None:
        if self._turn_over is None:
            self._turn_over = trio.Event()
        await self._turn_over.wait()

    def _end_turn(self) -> None:
        self._reading = False
        if self._turn_over is not None:
            self._turn_over.set()
            self._turn_over = None

    # -- iteration --------------------------------------------------------------------------

    def take_buffered(self, limit: int) -> list[Message | Gap]:
        """Up to ``limit`` items available without waiting: those already read, then the
        frames already received on the connection (never a socket read, never a reconnect).
        Empty while another task reads the connection. With ``anext`` this reads a burst
        in one wake-up."""
        out: list[Message | Gap] = []
        ready = self._ready
        while ready and len(out) < limit:
            out.append(ready.popleft())
        draining = self._draining
        connection = self._connection if draining is None else draining
        if self._reading or connection is None or self._closed:
            return out
        while len(out) < limit:
            frame = connection.buffered_frame()
            if frame is NEED_DATA:
                break
            if connection is draining:
                message = _message(frame)
            else:
                self._silence = 0.0
                message = self._handle(frame)
                if self._connection is not connection:
                    break
            if message is not None:
                out.append(message)
        return out

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message | Gap:
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                raise StopAsyncIteration
            if self._draining is None:
                if self._resubscribing is not None:  # the watch task subscribes again
                    await self._resubscribing.wait()
                    continue
                if self._connection is None:
                    await self._resubscribe()
                    continue
            await self._take_turn()
            try:
                draining = self._draining
                connection = self._connection if draining is None else draining
                if self._ready or connection is None or self._closed:
                    continue
                if connection is draining:
                    message = await self._read_dropped(connection)
                else:
                    message = await self._read(connection)
            finally:
                self._end_turn()
            if message is not None:
                return message

    async def _read(self, connection: Connection) -> Message | None:
        """One frame, or None after a bookkeeping frame, a loss or a health-check step.

        The health check counts only the time spent waiting here with nothing arriving
        (across calls, so a caller that waits in short slices is counted too); the caller's
        own time between messages, and messages still buffered, never count as silence.
        """
        if self.health_check_interval <= 0:
            try:
                frame = await connection.read_frame(describe="Pub/Sub read")
            except RedisConnectionError as exc:
                self._lose(connection, exc)
                return None
            return self._handle_from(connection, frame)
        budget = self.health_check_interval if self._ping is None else self.health_check_timeout
        started = trio.current_time()
        try:
            with trio.move_on_at(started + budget - self._silence) as waited:
                frame = await connection.read_frame(describe="Pub/Sub read")
        except RedisConnectionError as exc:
            self._lose(connection, exc)
            return None
        finally:
            self._silence += trio.current_time() - started
        if waited.cancelled_caught:
            if connection is self._connection:
                await self._check_health(connection)
            return None
        self._silence = 0.0
        return self._handle_from(connection, frame)

    def _handle_from(self, connection: Connection, frame: Any) -> Message | None:
        """:meth:`_handle` for a frame of the current connection; a message only, for one of
        a connection the watch task found dropped meanwhile (its answers are not awaited)."""
        if connection is self._connection:
            return self._handle(frame)
        return _message(frame)

    async def _read_dropped(self, connection: Connection) -> Message | None:
        """One frame of the connection the server dropped (what it received before the drop,
        then the end: it never waits for the server), or None once it is over."""
        try:
            frame = await connection.read_frame(describe="Pub/Sub read (dropped connection)")
        except RedisConnectionError as exc:
            self._lose(connection, exc)
            return None
        return _message(frame)

    def _lose(self, connection: Connection, error: RedisError) -> None:
        """``connection`` ended with ``error``: the current one is lost; a dropped one has
        delivered all it received, and what the current one delivered meanwhile follows."""
        if connection is self._connection:
            self._mark_lost(error)
            return
        connection.close()
        if connection is self._draining:
            self._draining = None
            self._ready.extend(self._after_drain)
            self._after_drain.clear()

    async def _check_health(self, connection: Connection) -> None:
        """The connection stayed silent for the health-check interval: PING it, or, when
        the PING sent earlier is still unanswered after the timeout, give it up."""
        self._silence = 0.0
        if self._ping is not None:
            self._mark_lost(
                RedisTimeoutError(
                    f"no answer to a health-check PING within {self.health_check_timeout}s "
                    "(the server is hung or unreachable)",
                    address=connection.address,
                    command="Pub/Sub health check",
                )
            )
            return
        ping = _Request(b"ping", (), add=False)
        self._requests.append(ping)
        self._ping = ping
        try:
            await connection.send_raw(
                pack_command(("PING", _PING_TOKEN)), describe="Pub/Sub health check"
            )
        except RedisConnectionError as exc:
            self._mark_lost(exc)

    # -- frames -----------------------------------------------------------------------------

    def _handle(self, frame: Any) -> Message | None:
        """A message from a frame; confirmations, PONGs and errors answer the oldest request."""
        if isinstance(frame, RedisError):
            self._answer(frame)
            return None
        if not isinstance(frame, list) or not frame:
            self._answer(None)  # RESP3: a plain reply (PONG) to the oldest request
            return None
        message = _message(frame)
        if message is not None:
            return message
        kind = frame[0]
        if kind in _GROUPS:
            self._confirmed(kind, frame)
        elif kind == b"pong" and type(frame) is not PushFrame:
            self._answer(None)  # RESP2: [pong, token]
        return None

    def _confirmed(self, kind: bytes, frame: list[Any]) -> None:
        head = self._requests[0] if self._requests else None
        if head is not None and head.command == kind:
            head.remaining -= 1
            if head.remaining == 0:
                self._answer(None)
            return
        if kind == b"sunsubscribe" and frame[1] in self._wanted["shard"]:
            # Nobody asked: the server dropped a shard channel still wanted because its slot
            # moved to another node. Reconnect so the opener finds the new owner; report it.
            connection = self._connection
            self._mark_lost(
                RedisConnectionError(
                    f"server unsubscribed shard channel {frame[1]!r} (slot moved)",
                    address=connection.address if connection else None,
                )
            )

    def _answer(self, error: RedisError | None) -> None:
        """The oldest request is answered (with ``error`` if the server refused it)."""
        if not self._requests:
            if error is not None:  # an answer to nothing: this connection cannot be trusted
                connection = self._connection
                self._mark_lost(
                    RedisConnectionError(
                        f"unexpected reply on a subscribed connection: {error}",
                        address=connection.address if connection else None,
                    )
                )
            return
        request = self._requests.popleft()
        request.done = True
        if request is self._ping:
            self._ping = None
            return
        connection = self._connection
        if error is not None:
            if isinstance(error, ReplyError):
                error.with_context(
                    _describe(request.command, request.names),
                    connection.address if connection else None,
                )
            request.error = error
        elif request.add:
            self._wanted[_GROUPS[request.command]].update(request.names)

    def _fail_requests(self, error: RedisConnectionError) -> None:
        requests, self._requests = self._requests, deque()
        self._ping = None
        for request in requests:
            request.done = True
            request.error = RedisConnectionError(
                f"{error.reason}; {_describe(request.command, request.names)} "
                "was not confirmed (not subscribed)",
                address=error.address,
                command=error.command,
            )

    def _mark_lost(self, error: RedisError) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = self._doomed = None
        if self._lost is None:
            self._lost = (error, trio.current_time())
            if self._on_lost is not None:
                self._on_lost(error)
        if isinstance(error, RedisConnectionError):
            self._fail_requests(error)
        else:
            self._fail_requests(RedisConnectionError(str(error)))
        if self._on_connection_lost is not None:
            self._on_connection_lost()

    async def _resubscribe(self) -> None:
        """Connect and subscribe again (backing off while it fails); queue the :class:`Gap`,
        then what arrived with the confirmations, behind what a dropped connection still
        delivers. The other tasks wait meanwhile (cancelled: they go on, and subscribe
        again themselves)."""
        assert self._lost is not None
        done = self._resubscribing = trio.Event()
        try:
            attempts = 0
            while True:
                attempts += 1
                arrived: deque[Message | Gap] = deque()
                try:
                    connection = await self._connect(arrived)
                except RedisConnectionError as exc:
                    if self._on_connection_lost is not None:
                        self._on_connection_lost()
                    self._lost = (exc, self._lost[1])  # the latest reason, the first loss time
                    await trio.sleep(self._backoff.failed())
                    continue
                break
            if self._closed:
                connection.close()
                return
            self._backoff.succeeded()
            self._connection = connection
            self._connected_at = now = trio.current_time()
            error, lost_at = self._lost
            self._lost = None
            gap = Gap(error, lost_at, now, attempts)
            into = self._arrivals()
            into.append(gap)
            into.extend(arrived)
        finally:
            self._resubscribing = None
            done.set()
        if self._on_resumed is not None:
            self._on_resumed(gap)

    def _arrivals(self) -> deque[Message | Gap]:
        """Where what the current connection delivers goes: behind a dropped connection
        that still drains."""
        return self._ready if self._draining is None else self._after_drain

    # -- noticing a drop while the caller is busy -------------------------------------------

    async def watch(self) -> None:
        """Notice that the server dropped the connection while the caller is busy, and
        subscribe again at once; run it in a task beside the iteration (cancel it to stop
        watching; it returns once the subscription is closed).

        Every ``health_check_interval`` seconds it writes a byte the server ignores
        (:meth:`~.connection.Connection.probe`). A server that dropped the connection answers
        that byte with a reset, which the next probe meets: the drop is then known within two
        intervals, however much the connection still holds for the caller to read. It is
        reported at once (``on_lost``) as beginning at the probe before the last one the
        server took: no later than the drop, so a gap is never under-reported. Then it
        subscribes again on a new connection (``on_resumed`` with the :class:`Gap`), while the
        iteration delivers what the dropped connection received, then the gap, then the new
        connection's messages. One dropped connection drains at a time: a second drop found
        meanwhile is reported at once and drains next. ``health_check_interval=0`` turns it
        off (it then waits until cancelled), and so does TLS (no probe can be written past the
        TLS stream): a drop is then found when the iteration reads up to it.
        """
        interval = self.health_check_interval
        if interval <= 0:
            await trio.sleep_forever()
        watched: Connection | None = None
        alive_at = probed_at = 0.0
        while not self._closed:
            await trio.sleep(interval)
            connection = self._connection
            if connection is None or self._closed:
                continue
            if connection is not watched:
                watched, alive_at, probed_at = connection, self._connected_at, self._connected_at
            if connection is not self._doomed:
                if connection.probe():
                    alive_at, probed_at = probed_at, trio.current_time()
                    continue
                self._found_dropped(connection, alive_at)
            if self._draining is None:  # one at a time: this one drains now, and a new one
                self._draining, self._connection, self._doomed = connection, None, None
                self._fail_requests(RedisConnectionError("the server dropped the connection"))
                if self._on_connection_lost is not None:
                    self._on_connection_lost()
                await self._resubscribe()

    def _found_dropped(self, connection: Connection, alive_at: float) -> None:
        """The watch task found ``connection`` dropped: report the loss (from ``alive_at``)."""
        self._doomed = connection
        if self._lost is None:
            error = RedisConnectionError(
                "the server dropped the connection (a subscriber that falls behind is dropped "
                "at its client-output-buffer-limit pubsub)",
                address=connection.address,
                command="Pub/Sub probe",
            )
            self._lost = (error, alive_at)
            if self._on_lost is not None:
                self._on_lost(error)

    async def _connect(self, arrived: deque[Message | Gap]) -> Connection:
        """Open a connection, subscribe to everything wanted, wait for every confirmation.

        The wait is bounded by the health check's timeout (when on): a server that accepts
        connections but does not answer is a failed attempt, not a hang.
        """
        connection = await self._opener()
        try:
            pending: deque[_Request] = deque(
                _Request(command, part, add=True)
                for command, group in (
                    (b"subscribe", "channels"),
                    (b"psubscribe", "patterns"),
                    (b"ssubscribe", "shard"),
                )
                if self._wanted[group]
                for part in _by_slot(command, sorted(self._wanted[group]))
            )
            if pending:
                await connection.send_raw(
                    b"".join(pack_command((r.command, *r.names)) for r in pending),
                    describe="SUBSCRIBE",
                )
            deadline = (
                trio.current_time() + self.health_check_timeout
                if self.health_check_interval > 0
                else math.inf
            )
            while pending:
                with trio.move_on_at(deadline) as waited:
                    frame = await connection.read_frame(describe="SUBSCRIBE")
                if waited.cancelled_caught:
                    raise RedisTimeoutError(
                        f"no confirmation of the subscriptions within {self.health_check_timeout}s",
                        address=connection.address,
                        command="SUBSCRIBE",
                    )
                head = pending[0]
                if isinstance(frame, RedisError):
                    if isinstance(frame, ReplyError):
                        frame.with_context(_describe(head.command, head.names), connection.address)
                    raise frame
                if isinstance(frame, list) and frame and frame[0] == head.command:
                    head.remaining -= 1
                    if head.remaining == 0:
                        pending.popleft()
                    continue
                message = self._handle(frame)
                if message is not None:
                    arrived.append(message)
        except BaseException:
            connection.close()
            raise
        self._silence = 0.0
        return connection
