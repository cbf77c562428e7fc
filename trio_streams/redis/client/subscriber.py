"""Pub/Sub subscriptions: SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE as an async iterator.

A subscription owns one connection, outside any pool, and reads it only while the caller
iterates, so it needs no background task and its back-pressure is the caller's pace. Messages
arrive as RESP3 push frames (or RESP2 arrays on old servers).

Pub/Sub is fire-and-forget: messages published while the connection is down are gone. So when
the connection is lost the subscription reconnects (capped, jittered backoff), subscribes again
to everything, and yields a :class:`Gap` before the next message, saying how long it was deaf
and why. A caller that cannot tolerate gaps learns of each one; nothing is silently papered over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

import trio

from .backoff import Backoff
from .connection import Connection
from .errors import RedisConnectionError, RedisError
from .protocol import Command, pack_command


@dataclass(frozen=True, slots=True)
class Message:
    """One published message."""

    #: ``message`` (SUBSCRIBE), ``pmessage`` (PSUBSCRIBE) or ``smessage`` (SSUBSCRIBE).
    kind: Literal["message", "pmessage", "smessage"]
    channel: bytes
    data: bytes
    #: The pattern that matched, for ``pmessage``.
    pattern: bytes | None = None


@dataclass(frozen=True, slots=True)
class Gap:
    """The subscription was disconnected from ``lost_at`` to ``resumed_at`` (Trio clock
    seconds): messages published in between were not received."""

    error: RedisError
    lost_at: float
    resumed_at: float
    #: Connection attempts it took to resubscribe.
    attempts: int


_CONFIRM = {b"subscribe": "channels", b"psubscribe": "patterns", b"ssubscribe": "shard"}
_KIND = {b"message": "message", b"pmessage": "pmessage", b"smessage": "smessage"}


def _as_bytes(name: str | bytes) -> bytes:
    return name if isinstance(name, bytes) else name.encode()


class Subscription:
    """Messages of the subscribed channels, patterns and shard channels.

    Use ``async with client.subscribe(...) as sub: async for item in sub:``; items are
    :class:`Message` and, after a reconnect, :class:`Gap`. When ``async with`` returns, every
    initial subscription is confirmed by the server.
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
    ) -> None:
        self._opener = opener
        self._wanted: dict[str, set[bytes]] = {
            "channels": {_as_bytes(c) for c in channels},
            "patterns": {_as_bytes(p) for p in patterns},
            "shard": {_as_bytes(s) for s in shard_channels},
        }
        self._backoff = backoff
        self._on_connection_lost = on_connection_lost
        self._connection: Connection | None = None
        self._ready: deque[Message | Gap] = deque()
        self._lost: tuple[RedisError, float] | None = None
        self._closed = False

    @property
    def channels(self) -> frozenset[bytes]:
        """Channels subscribed with SUBSCRIBE."""
        return frozenset(self._wanted["channels"])

    @property
    def patterns(self) -> frozenset[bytes]:
        """Patterns subscribed with PSUBSCRIBE."""
        return frozenset(self._wanted["patterns"])

    @property
    def shard_channels(self) -> frozenset[bytes]:
        """Channels subscribed with SSUBSCRIBE."""
        return frozenset(self._wanted["shard"])

    @property
    def connection(self) -> Connection | None:
        """The current connection (None while reconnecting)."""
        return self._connection

    async def __aenter__(self) -> Self:
        self._connection = await self._connect()
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
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        await trio.lowlevel.checkpoint()

    # -- changing what is subscribed --------------------------------------------------------

    async def subscribe(self, *channels: str | bytes) -> None:
        """Add channels (confirmed asynchronously; messages follow in the iteration)."""
        await self._change("SUBSCRIBE", "channels", channels, add=True)

    async def unsubscribe(self, *channels: str | bytes) -> None:
        """Remove channels."""
        await self._change("UNSUBSCRIBE", "channels", channels, add=False)

    async def psubscribe(self, *patterns: str | bytes) -> None:
        """Add patterns."""
        await self._change("PSUBSCRIBE", "patterns", patterns, add=True)

    async def punsubscribe(self, *patterns: str | bytes) -> None:
        """Remove patterns."""
        await self._change("PUNSUBSCRIBE", "patterns", patterns, add=False)

    async def ssubscribe(self, *channels: str | bytes) -> None:
        """Add shard channels (in a cluster they must live on this subscription's node)."""
        await self._change("SSUBSCRIBE", "shard", channels, add=True)

    async def sunsubscribe(self, *channels: str | bytes) -> None:
        """Remove shard channels."""
        await self._change("SUNSUBSCRIBE", "shard", channels, add=False)

    async def _change(
        self, command: str, group: str, names: Iterable[str | bytes], *, add: bool
    ) -> None:
        encoded = [_as_bytes(n) for n in names]
        if not encoded:
            return
        if add:
            self._wanted[group].update(encoded)
        else:
            self._wanted[group].difference_update(encoded)
        if self._connection is not None:  # otherwise the reconnect subscribes
            try:
                await self._connection.send_raw(pack_command((command, *encoded)))
            except RedisConnectionError as exc:
                self._mark_lost(exc)

    # -- iteration --------------------------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message | Gap:
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._closed:
                raise StopAsyncIteration
            connection = self._connection
            if connection is None:
                return await self._resubscribe()
            try:
                frame = await connection.read_frame(describe="Pub/Sub read")
            except RedisConnectionError as exc:
                self._mark_lost(exc)
                continue
            message = self._interpret(frame)
            if message is not None:
                return message

    def _interpret(self, frame: Any) -> Message | None:
        """A message from a frame, or None for confirmations and other bookkeeping frames."""
        if not isinstance(frame, list) or not frame:
            return None
        kind = frame[0]
        if kind == b"message" or kind == b"smessage":
            return Message(_KIND[kind], frame[1], frame[2])  # type: ignore[arg-type]
        if kind == b"pmessage":
            return Message("pmessage", frame[2], frame[3], frame[1])
        if kind == b"sunsubscribe" and frame[1] in self._wanted["shard"]:
            # The server dropped a shard channel we still want: its slot moved to another
            # node. Reconnect so the opener finds the new owner; report the gap.
            error = RedisConnectionError(
                f"server unsubscribed shard channel {frame[1]!r} (slot moved)",
                address=self._connection.address if self._connection else None,
            )
            if self._connection is not None:
                self._connection.close()
            self._mark_lost(error)
        return None

    def _mark_lost(self, error: RedisError) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None
        if self._lost is None:
            self._lost = (error, trio.current_time())
        if self._on_connection_lost is not None:
            self._on_connection_lost()

    async def _resubscribe(self) -> Gap:
        assert self._lost is not None
        attempts = 0
        while True:
            attempts += 1
            try:
                self._connection = await self._connect()
            except RedisConnectionError as exc:
                if self._on_connection_lost is not None:
                    self._on_connection_lost()
                self._lost = (exc, self._lost[1])  # report the latest reason, the first loss time
                await trio.sleep(self._backoff.failed())
                continue
            self._backoff.succeeded()
            error, lost_at = self._lost
            self._lost = None
            return Gap(error, lost_at, trio.current_time(), attempts)

    async def _connect(self) -> Connection:
        """Open a connection, subscribe to everything wanted, wait for every confirmation."""
        connection = await self._opener()
        try:
            commands: list[Command] = [
                (command, *sorted(self._wanted[group]))
                for command, group in (
                    ("SUBSCRIBE", "channels"),
                    ("PSUBSCRIBE", "patterns"),
                    ("SSUBSCRIBE", "shard"),
                )
                if self._wanted[group]
            ]
            outstanding = sum(len(c) - 1 for c in commands)
            if commands:
                await connection.send_raw(
                    b"".join(pack_command(c) for c in commands), describe="SUBSCRIBE"
                )
            while outstanding:
                frame = await connection.read_frame(describe="SUBSCRIBE")
                if isinstance(frame, RedisError):
                    raise frame
                if isinstance(frame, list) and frame and frame[0] in _CONFIRM:
                    outstanding -= 1
                    continue
                message = self._interpret(frame)
                if message is not None:
                    self._ready.append(message)
        except BaseException:
            connection.close()
            raise
        return connection
