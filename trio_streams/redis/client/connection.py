"""One connection to one server: open it (TCP, TLS, HELLO/AUTH/SELECT), then run commands.

The connection is the thin I/O layer around :mod:`.protocol`. Its one hard rule: a connection
whose replies are not all read is never used again. Any exception while replies are
outstanding -- cancellation, a dead socket, a protocol error -- marks it broken and closes the
socket at once, so a cancelled ``XREADGROUP BLOCK`` or ``BLMOVE`` unblocks on the server (it
notices the closed socket) and a pool can never hand out a half-read connection.

A connection serves one task at a time; a second concurrent user gets ``trio.BusyResourceError``.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import trio

from .config import ConnectionOptions
from .errors import (
    Address,
    RedisConnectionError,
    RedisProtocolError,
    RedisTimeoutError,
    ReplyError,
    describe_command,
    format_address,
)
from .pipeline import TransactionBlock, unwrap_transaction, wire_commands
from .protocol import NEED_DATA, Command, PushFrame, ReplyParser, pack_command, pack_commands
from .replies import Replies

#: Bytes asked of the socket per receive; large enough for a COUNT 100 stream read.
_RECEIVE_SIZE = 256 * 1024

#: Plain TCP connections read and write their socket's descriptor directly (see _send).
_DIRECT_IO = os.name == "posix"


class Connection:
    """An open, set-up connection. Create it with :func:`open_connection`."""

    __slots__ = (
        "_busy",
        "_fd",
        "_parser",
        "_socket",
        "_stream",
        "address",
        "broken",
        "protocol",
    )

    def __init__(
        self,
        stream: trio.SocketStream | trio.SSLStream[trio.SocketStream],
        socket_stream: trio.SocketStream,
        address: Address,
    ) -> None:
        self._stream = stream
        self._socket = socket_stream.socket
        #: The descriptor for direct I/O, or -1 when the stream (TLS) does the I/O.
        self._fd = socket_stream.socket.fileno() if _DIRECT_IO and stream is socket_stream else -1
        self._parser = ReplyParser()
        self._busy = False
        #: The server this connection talks to.
        self.address = address
        #: True once the connection lost sync with the server; it is closed and must be dropped.
        self.broken = False
        #: The RESP version spoken (2 or 3), known after the handshake.
        self.protocol = 2

    def __repr__(self) -> str:
        state = "broken" if self.broken else "open"
        return f"<Connection redis {format_address(self.address)} resp{self.protocol} {state}>"

    # -- commands ---------------------------------------------------------------------------

    async def execute(self, *args: Any) -> Any:
        """Run one command and return its reply; an error reply is raised as ReplyError."""
        return await self.execute_command(args)

    async def execute_command(self, args: Command) -> Any:
        """:meth:`execute` with the arguments as one sequence."""
        reply = (await self._roundtrip(pack_command(args), 1, args))[0]
        if isinstance(reply, ReplyError):
            raise reply.with_context(describe_command(args), self.address)
        return reply

    async def execute_many(self, commands: Sequence[Command]) -> Replies:
        """Send every command in one write and return the replies in order.

        Error replies stay in place as :class:`ReplyError` values (see :meth:`Replies.raise_first`).
        """
        if not commands:
            return Replies()
        replies = await self._roundtrip(pack_commands(commands), len(commands), commands[0])
        for reply, args in zip(replies, commands, strict=True):
            if isinstance(reply, ReplyError):
                reply.with_context(describe_command(args), self.address)
        return replies

    async def execute_transaction(self, commands: Sequence[Command]) -> Replies:
        """MULTI, ``commands``, EXEC in one write; the EXEC replies (errors in place).

        Raises :class:`~.errors.WatchError` if a key this connection WATCHed changed, and
        :class:`~.errors.ExecAbortError` if the server rejected a command (nothing ran).
        """
        replies = await self.execute_many(wire_commands([TransactionBlock(commands)]))
        return unwrap_transaction(replies, commands, self.address)

    async def send_raw(self, data: bytes, *, describe: str = "") -> None:
        """Send already packed commands without waiting for replies (Pub/Sub uses this).

        A failure or cancellation part way through breaks the connection.
        """
        self._check_usable(describe)
        try:
            await self._send(data)
            await trio.lowlevel.checkpoint()
        except BaseException as exc:
            translated = self._fail(exc, describe)
            if translated is exc:
                raise
            raise translated from exc

    async def read_frame(self, *, describe: str = "") -> Any:
        """Read the next reply or push frame, whatever it is (Pub/Sub uses this).

        Only one task may read at a time. Cancelling the wait is safe and keeps the connection:
        nothing is outstanding, and bytes already received stay buffered for the next read.
        Any other failure breaks the connection.
        """
        self._check_usable(describe)
        if self._busy:
            raise trio.BusyResourceError("another task is reading this Redis connection")
        self._busy = True
        try:
            frame = await self._read_one(describe, skip_push=False)
        except trio.Cancelled:
            self._busy = False  # receive_some loses nothing when cancelled
            raise
        except BaseException as exc:
            translated = self._fail(exc, describe)
            if translated is exc:
                raise
            raise translated from exc
        self._busy = False
        return frame

    # -- state ------------------------------------------------------------------------------

    def is_in_sync(self) -> bool:
        """True when not broken, not in use, and no unread reply bytes are buffered."""
        return not (self.broken or self._busy or self._parser.has_buffered_data())

    def is_reusable(self) -> bool:
        """True when the connection is idle, in sync, and the server sent nothing unasked.

        An idle connection that is readable has either been closed by the server or received
        bytes nobody asked for; either way it cannot be trusted with the next command.
        """
        if not self.is_in_sync():
            return False
        if isinstance(self._stream, trio.SSLStream):
            try:
                if self._stream._ssl_object.pending():  # bytes decrypted but not yet read
                    return False
            except AttributeError:  # pragma: no cover - private attribute missing
                pass
        # poll, not select: select cannot watch descriptors above 1023.
        poller = select.poll()
        try:
            poller.register(self._socket.fileno(), select.POLLIN)
        except (OSError, ValueError):  # already closed
            return False
        return not poller.poll(0)

    def close(self) -> None:
        """Close the socket now (synchronously); the connection is broken from here on."""
        self.broken = True
        self._socket.close()

    async def aclose(self) -> None:
        """Close the connection (a graceful TLS close is not attempted: nobody waits for it)."""
        self.close()
        await trio.lowlevel.checkpoint()

    # -- internals --------------------------------------------------------------------------

    def _check_usable(self, describe: str) -> None:
        if self.broken:
            raise RedisConnectionError(
                "connection is closed (it broke earlier)", address=self.address, command=describe
            )

    async def _roundtrip(self, data: bytes, count: int, first: Command) -> Replies:
        if self.broken:
            self._check_usable(describe_command(first))
        if self._busy:
            raise trio.BusyResourceError("another task is using this Redis connection")
        self._busy = True
        try:
            await self._send(data)
            parser = self._parser
            replies = Replies()
            while True:
                reply = parser.next_reply()
                if reply is NEED_DATA:
                    chunk = await self._receive()
                    if not chunk:
                        raise RedisConnectionError(
                            "server closed the connection", address=self.address
                        )
                    parser.feed(chunk)
                elif type(reply) is PushFrame:
                    continue  # an unrequested push (e.g. invalidation) is not a reply
                else:
                    replies.append(reply)
                    if len(replies) == count:
                        parser.settled()
                        break
        except BaseException as exc:
            translated = self._fail(exc, describe_command(first))
            if translated is exc:
                raise
            raise translated from exc
        self._busy = False
        return replies

    async def _read_one(self, describe: str, *, skip_push: bool) -> Any:
        parser = self._parser
        while True:
            reply = parser.next_reply()
            if reply is NEED_DATA:
                chunk = await self._receive()
                if not chunk:
                    raise RedisConnectionError("server closed the connection", address=self.address)
                parser.feed(chunk)
            elif skip_push and type(reply) is PushFrame:
                continue
            else:
                parser.settled()
                return reply

    async def _send(self, data: bytes) -> None:
        """Write all of ``data``.

        On plain TCP the descriptor is written at once, and the task waits only if the socket
        buffer is full: a command then costs one system call and no pass through the
        scheduler (the read of its reply waits anyway). This is not a checkpoint when the
        socket took everything.
        """
        fd = self._fd
        if fd < 0:
            await self._stream.send_all(data)
            return
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            view = memoryview(data)
            while sent < len(data):
                await trio.lowlevel.wait_writable(fd)
                try:
                    sent += os.write(fd, view[sent:])
                except BlockingIOError:
                    pass

    async def _receive(self) -> bytes | bytearray:
        """The next bytes received (b"" at end of stream); a checkpoint, cancellable with
        nothing lost. On plain TCP the descriptor is read directly, waiting for it to be
        readable only when it has nothing yet."""
        fd = self._fd
        if fd < 0:
            return await self._stream.receive_some(_RECEIVE_SIZE)
        # One pass through the scheduler first: it lets the server answer meanwhile, so the
        # read usually finds the reply instead of putting the task to sleep in epoll.
        await trio.lowlevel.checkpoint()
        while True:
            try:
                return os.read(fd, _RECEIVE_SIZE)
            except BlockingIOError:
                pass
            await trio.lowlevel.wait_readable(fd)

    def _fail(self, exc: BaseException, describe: str) -> BaseException:
        """Break and close the connection; return the exception to raise in exc's place.

        Cancellation and other BaseExceptions pass through unchanged (with the connection
        closed); transport failures become a RedisConnectionError naming server and command.
        """
        self._busy = False
        self.close()
        if isinstance(exc, RedisConnectionError):
            if not exc.command:
                exc.command = describe
            if exc.address is None:
                exc.address = self.address
            return exc
        if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError, OSError)):
            return RedisConnectionError(
                f"connection lost: {exc or type(exc).__name__}",
                address=self.address,
                command=describe,
            )
        return exc


async def open_connection(address: Address, options: ConnectionOptions) -> Connection:
    """Connect to ``address``, wrap in TLS if configured, and run the handshake.

    The handshake asks for RESP3 with ``HELLO 3`` (authenticating and naming the client in the
    same command) and falls back to ``AUTH``/``CLIENT SETNAME`` over RESP2 when the server has no
    HELLO. Everything, including connect, is bounded by ``options.connect_timeout``.
    """
    host, port = address
    try:
        with trio.fail_after(options.connect_timeout):
            return await _connect(address, options)
    except RedisConnectionError:
        raise
    except trio.TooSlowError:
        raise RedisTimeoutError(
            f"connect and handshake took longer than {options.connect_timeout}s", address=address
        ) from None
    except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else None
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = f"TLS handshake failed: {cause.reason}: {cause.verify_message}"
        elif isinstance(cause, ssl.SSLError):
            reason = f"TLS handshake failed: {cause.reason or cause}"
        elif isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        elif isinstance(exc.__cause__, OSError) and exc.__cause__.strerror:
            reason = exc.__cause__.strerror  # trio's "all attempts failed" wraps the reason
        else:
            reason = str(exc)
        raise RedisConnectionError(
            f"cannot connect to {host}:{port}: {reason or type(exc).__name__}", address=address
        ) from exc


async def _connect(address: Address, options: ConnectionOptions) -> Connection:
    host, port = address
    socket_stream = await trio.open_tcp_stream(host, port)
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = socket_stream
    try:
        _keep_alive(socket_stream)
        if options.ssl_context is not None:
            ssl_stream = trio.SSLStream(
                socket_stream,
                options.ssl_context,
                server_hostname=options.ssl_server_hostname or host,
            )
            await ssl_stream.do_handshake()
            stream = ssl_stream
        connection = Connection(stream, socket_stream, address)
        await _handshake(connection, options)
    except BaseException:
        socket_stream.socket.close()
        raise
    return connection


#: TCP keepalive: probe an idle connection after 30 s, every 10 s, give up after 3 misses, so a
#: peer that vanished (host down, network cut, no reset) is noticed in about a minute.
_KEEPALIVE = (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))


def _keep_alive(stream: trio.SocketStream) -> None:
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _KEEPALIVE:
        option = getattr(socket, name, None)
        if option is not None:  # Linux and most others; the OS defaults elsewhere
            stream.setsockopt(socket.IPPROTO_TCP, option, value)


async def _handshake(connection: Connection, options: ConnectionOptions) -> None:
    setup: list[Command] = []
    if options.db:
        setup.append(("SELECT", options.db))
    if options.protocol == 3:
        hello: list[Any] = ["HELLO", 3]
        if options.password is not None:
            hello += ["AUTH", options.username or "default", options.password]
        if options.client_name:
            hello += ["SETNAME", options.client_name]
        replies = await connection.execute_many([hello, *setup])
        if not isinstance(replies[0], ReplyError):
            connection.protocol = 3
            _raise_setup_errors(replies[1:])
            return
        if not _is_unknown_command(replies[0]):
            raise replies[0]
    # RESP2: the server has no HELLO (or RESP2 was asked for).
    legacy: list[Command] = []
    if options.password is not None:
        legacy.append(
            ("AUTH", options.username, options.password)
            if options.username
            else ("AUTH", options.password)
        )
    if options.client_name:
        legacy.append(("CLIENT", "SETNAME", options.client_name))
    if legacy or setup:
        _raise_setup_errors(await connection.execute_many([*legacy, *setup]))
    connection.protocol = 2


def _is_unknown_command(error: ReplyError) -> bool:
    text = error.message.lower()
    return error.code == "NOPROTO" or "unknown command" in text


def _raise_setup_errors(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise reply


__all__ = ["Connection", "RedisProtocolError", "open_connection"]
