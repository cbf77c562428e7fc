"""One connection to one server: open it (TCP, TLS, HELLO/AUTH/SELECT), then run commands.

The connection is the thin I/O layer around :mod:`.protocol`. Its one hard rule: a connection
whose replies are not all read is never used again. Any exception while replies are
outstanding -- cancellation, a dead socket, a protocol error -- marks it broken and closes the
socket at once, so a cancelled ``XREADGROUP BLOCK`` or ``BLMOVE`` unblocks on the server (it
notices the closed socket) and a pool can never hand out a half-read connection.

Before anything is sent, each command is classified by name (:mod:`.commands`): an empty
command, or one that would change the connection's mode for its next user (``SUBSCRIBE``,
``SELECT``, ``HELLO``...), is refused; ``MULTI``/``WATCH`` and their ends are tracked, so a pool
can tell a connection that carries session state (:attr:`Connection.has_session_state`).
Commands sent with :meth:`Connection.send_raw` are not tracked: such a connection is never
considered in sync again, so no pool keeps it.

With ``command_timeout`` set, a command that gets no reply in time raises
:class:`~.errors.RedisTimeoutError` and the connection is closed like any interrupted one.

A connection serves one task at a time; a second concurrent user gets ``trio.BusyResourceError``.
"""

from __future__ import annotations

import os
import re
import select
import socket
import ssl
from collections.abc import Sequence
from typing import Any, Final

import trio

from ..._version import __version__
from .commands import (
    BLOCKING,
    CLIENT,
    EXEC,
    KINDS,
    MULTI,
    REFUSED,
    UNWATCH,
    WATCH,
    block_seconds,
    kind_of,
    refusal,
)
from .config import ConnectionOptions
from .errors import (
    Address,
    AuthenticationError,
    ConnectionSetupError,
    HandshakeError,
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
from .tls_mismatch import plain_refused, tls_handshake, wrong_scheme_hint

#: Bytes asked of the socket per receive; large enough for a COUNT 100 stream read.
_RECEIVE_SIZE = 256 * 1024

#: Plain TCP connections read and write their socket's descriptor directly (see _send).
_DIRECT_IO = os.name == "posix"


class Connection:
    """An open, set-up connection. Create it with :func:`open_connection`."""

    __slots__ = (
        "_busy",
        "_fd",
        "_multi",
        "_parser",
        "_sending",
        "_socket",
        "_stream",
        "_untracked",
        "_watch",
        "address",
        "broken",
        "command_timeout",
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
        self._sending = False  # a write is waiting for room in the socket buffer
        #: The server this connection talks to.
        self.address = address
        #: True once the connection lost sync with the server; it is closed and must be dropped.
        self.broken = False
        #: The RESP version spoken (2 or 3), known after the handshake.
        self.protocol = 2
        #: Seconds a command may wait for its reply (None: no limit but the caller's).
        self.command_timeout: float | None = None
        self._multi = False  # a MULTI is open: commands are queued, not run
        self._watch = False  # keys are WATCHed
        self._untracked = False  # send_raw was used: replies no longer match commands

    def __repr__(self) -> str:
        state = "broken" if self.broken else "open"
        return f"<Connection redis {format_address(self.address)} resp{self.protocol} {state}>"

    # -- commands ---------------------------------------------------------------------------

    async def execute(self, *args: Any) -> Any:
        """Run one command and return its reply; an error reply is raised as ReplyError."""
        return await self.execute_command(args)

    async def execute_command(self, args: Command) -> Any:
        """:meth:`execute` with the arguments as one sequence.

        Raises :class:`~.errors.CommandEncodingError` (empty command, bad argument) or
        :class:`~.errors.CommandNotAllowedError` before sending anything.
        """
        data = pack_command(args)
        try:
            kind = KINDS[args[0]]
        except (KeyError, IndexError, TypeError):
            kind = kind_of(args)
        timeout = self._admit((args,)) if kind else self.command_timeout
        if timeout is None:
            replies = await self._roundtrip(data, 1, args)
        else:
            replies = await self._timed_roundtrip(data, 1, args, timeout)
        reply = replies[0]
        if isinstance(reply, ReplyError):
            raise reply.with_context(describe_command(args), self.address)
        return reply

    async def execute_many(self, commands: Sequence[Command]) -> Replies:
        """Send every command in one write and return the replies in order.

        Error replies stay in place as :class:`ReplyError` values (see :meth:`Replies.raise_first`).
        A refused or unencodable command raises before anything of the batch is sent.
        """
        if not commands:
            return Replies()
        data = pack_commands(commands)
        timeout = self._admit(commands)
        if timeout is None:
            replies = await self._roundtrip(data, len(commands), commands[0])
        else:
            replies = await self._timed_roundtrip(data, len(commands), commands[0], timeout)
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

        Nothing is checked or tracked: from here on the connection's replies no longer match
        the commands it knows of, so a pool never takes it back. A failure or cancellation part
        way through breaks the connection.
        """
        self._check_usable(describe)
        self._untracked = True
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

    def probe(self) -> bool:
        """Write one byte the server ignores (a bare newline: an empty inline command, which
        gets no reply) and tell whether the server may still hold the connection.

        False once the server has reset it. A server that closed the connection while this
        side still had unread bytes sends no sign that reaches this side before those bytes
        are read; the bytes it then gets on the connection it answers with a reset, which the
        next probe meets. What the connection received stays readable: the probe never waits,
        never breaks nor closes the connection. On TLS (a byte outside the TLS stream would
        corrupt it), while a write waits for room, and when the socket buffer is full, nothing
        is sent and the answer is True.
        """
        if self.broken:
            return False
        if self._fd < 0 or self._sending:
            return True
        try:
            os.write(self._fd, b"\n")
        except BlockingIOError:
            return True
        except OSError:  # reset (or a half-closed connection written to twice)
            return False
        return True

    def buffered_frame(self) -> Any:
        """The next frame already received, or ``NEED_DATA``: never waits, never reads the
        socket (a Pub/Sub reader takes what one receive brought in at once)."""
        if self._busy:
            raise trio.BusyResourceError("another task is reading this Redis connection")
        frame = self._parser.next_reply()
        if frame is not NEED_DATA:
            self._parser.settled()
        return frame

    # -- state ------------------------------------------------------------------------------

    def is_in_sync(self) -> bool:
        """True when not broken, not in use, every reply was read (no unread bytes buffered,
        nothing sent with :meth:`send_raw`)."""
        return not (
            self.broken or self._busy or self._untracked or self._parser.has_buffered_data()
        )

    @property
    def has_session_state(self) -> bool:
        """True while a ``MULTI`` is open or keys are ``WATCH``ed on this connection."""
        return self._multi or self._watch

    async def reset_session(self) -> None:
        """End an open ``MULTI`` (``DISCARD``) and forget watched keys (``UNWATCH``).

        One round trip; safe whatever the state (a DISCARD without MULTI is an error reply,
        ignored). ``RESET`` is not used: it would also undo the handshake (user, protocol,
        database, name), which would then have to be redone.
        """
        data = pack_commands((("DISCARD",), ("UNWATCH",)))
        first = ("DISCARD",)
        if self.command_timeout is None:
            await self._roundtrip(data, 2, first)
        else:
            await self._timed_roundtrip(data, 2, first, self.command_timeout)
        self._multi = self._watch = False

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

    def _admit(self, commands: Sequence[Command]) -> float | None:
        """Check ``commands`` before sending, track their session effects; return the time
        the batch may wait for its replies (None: unbounded).

        Raises for an empty, refused or unencodable command; then nothing is sent and the
        tracked state is unchanged.
        """
        multi, watch = self._multi, self._watch
        timeout = self.command_timeout
        kinds = KINDS
        for args in commands:
            try:
                kind = kinds[args[0]]
            except (KeyError, IndexError, TypeError):
                kind = kind_of(args)  # a name not seen yet, or an empty command
            if not kind:
                continue
            if kind & (REFUSED | CLIENT):
                error = refusal(args, kind)
                if error is not None:
                    raise error
            elif kind & MULTI:
                multi = True
            elif kind & EXEC:
                if multi:  # EXEC/DISCARD without MULTI is refused and changes nothing
                    multi = watch = False
            elif kind & WATCH:
                watch = watch or not multi  # WATCH inside MULTI is refused
            elif kind & UNWATCH:
                if not multi:  # inside MULTI it is queued; EXEC unwatches anyway
                    watch = False
            elif kind & BLOCKING and timeout is not None:
                blocked = block_seconds(args)
                timeout = None if blocked is None else timeout + blocked
        self._multi, self._watch = multi, watch
        return timeout

    async def _timed_roundtrip(
        self, data: bytes, count: int, first: Command, limit: float
    ) -> Replies:
        """:meth:`_roundtrip` bounded by ``limit`` seconds (the command timeout)."""
        with trio.move_on_after(limit):
            return await self._roundtrip(data, count, first)
        # The cancellation closed the connection (_fail): nothing half-read is left behind.
        raise RedisTimeoutError(
            f"no reply within {limit:g}s (command_timeout); the connection is closed and "
            "the command may still run on the server",
            address=self.address,
            command=describe_command(first),
        )

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
                    # At every reply the stream may be at a frame boundary again: the parser
                    # keeps only the bytes of the frame still arriving (a large reply in a
                    # pipeline must not make it lose track of the attribute frames after it).
                    parser.settled()
                    if len(replies) == count:
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
            self._sending = True
            try:
                while sent < len(data):
                    await trio.lowlevel.wait_writable(fd)
                    try:
                        sent += os.write(fd, view[sent:])
                    except BlockingIOError:
                        pass
            finally:
                self._sending = False

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
            hint = wrong_scheme_hint(cause)
            reason = f"TLS handshake failed: {cause.reason or cause}" + (
                f"; {hint}" if hint else ""
            )
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
            await tls_handshake(ssl_stream, address)
            stream = ssl_stream
        connection = Connection(stream, socket_stream, address)
        try:
            await _handshake(connection, options)
        except (RedisConnectionError, trio.BrokenResourceError, OSError) as exc:
            if options.ssl_context is not None or isinstance(
                exc, HandshakeError | RedisTimeoutError | RedisProtocolError
            ):
                raise
            raise plain_refused(exc, address) from exc
    except BaseException:
        socket_stream.socket.close()
        raise
    connection.command_timeout = options.command_timeout
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


#: Who is connecting, for ``CLIENT LIST`` (``lib-name=trio-streams lib-ver=...``): sent with
#: the rest of the handshake. A server without ``CLIENT SETINFO`` (before Redis 7.2), or a user
#: whose ACL denies it, answers these two with an error, which is ignored.
LIBRARY: Final[tuple[Command, Command]] = (
    ("CLIENT", "SETINFO", "LIB-NAME", "trio-streams"),
    ("CLIENT", "SETINFO", "LIB-VER", __version__),
)


async def _handshake(connection: Connection, options: ConnectionOptions) -> None:
    """HELLO (or AUTH and CLIENT SETNAME), CLIENT SETINFO, SELECT, then PING, in one write
    per attempt.

    The PING proves the server is ready for data: a server still loading its dataset, busy
    with a script or cut off from its primary answers it with an error (HELLO and SELECT
    pass even then), which becomes a retryable :class:`HandshakeError`. ``CLIENT SETINFO``
    names the library where the server has it; its error (an older server, an ACL) is not the
    connection's: ignored, so naming the library costs no round trip and no probe.
    """
    setup: list[Command] = [*LIBRARY]
    if options.db:
        setup.append(("SELECT", options.db))
    setup.append(("PING",))
    if options.protocol == 3:
        hello: list[Any] = ["HELLO", 3]
        if options.password is not None:
            hello += ["AUTH", options.username or "default", options.password]
        if options.client_name:
            hello += ["SETNAME", options.client_name]
        commands = [hello, *setup]
        replies = await _exchange(connection, commands, options)
        if not isinstance(replies[0], ReplyError):
            connection.protocol = 3
            _raise_setup_errors(connection, commands, replies, options)
            return
        if not _is_unknown_command(replies[0]):
            raise _setup_error(connection, hello, replies[0], options)
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
    commands = [*legacy, *setup]
    _raise_setup_errors(
        connection, commands, await _exchange(connection, commands, options), options
    )
    connection.protocol = 2


async def _exchange(
    connection: Connection, commands: Sequence[Command], options: ConnectionOptions
) -> list[Any]:
    """Send the setup commands in one write and read one reply for each.

    These commands bypass the refusals of :meth:`Connection.execute_many` (they are the
    handshake). A server that refuses a connection and closes it (``maxclients``) is reported
    by its refusal, not as a bare "connection closed".
    """
    describe = describe_command(commands[0])
    replies: list[Any] = []
    try:
        await connection._stream.send_all(pack_commands(commands))
        while len(replies) < len(commands):
            replies.append(await connection._read_one(describe, skip_push=True))
    except (RedisConnectionError, trio.BrokenResourceError, OSError) as exc:
        for args, reply in zip(commands, replies, strict=False):
            if (
                isinstance(reply, ReplyError)
                and args not in LIBRARY
                and not _is_unknown_command(reply)
            ):
                raise _setup_error(connection, args, reply, options) from exc
        if isinstance(exc, RedisConnectionError):
            if exc.address is None:
                exc.address = connection.address
            if not exc.command:
                exc.command = describe
        raise  # a transport failure: open_connection names it
    return replies


#: An argument as a server echoes it back in an error: ``'value'`` (an unknown command's
#: "with args beginning with: '3' 'AUTH' 'user' 'secret'").
_ECHOED_ARGUMENT = re.compile(r"'([^']*)'")


def mask_echoed_secret(message: str, secret: str) -> str:
    """``message`` with ``secret`` replaced by ``***`` where a server echoes it: as a quoted
    argument, whole or cut short (Redis lists at most 128 characters of arguments, so the last
    one may be a part of the password). Only the argument is masked, never a word that happens
    to contain the password: with the password ``pass``, ``WRONGPASS invalid
    username-password pair`` stays as the server said it."""
    masked = message.replace(f"'{secret}'", "'***'")
    quoted = list(_ECHOED_ARGUMENT.finditer(masked))
    if quoted:
        last = quoted[-1]
        if last.group(1) and secret.startswith(last.group(1)) and not masked[last.end() :].strip():
            masked = f"{masked[: last.start()]}'***'{masked[last.end() :]}"
    return masked


#: Refusals that pass with time: the client paces its retries instead of failing for good.
_RETRYABLE_CODES = frozenset({"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"})


def _setup_error(
    connection: Connection, args: Command, reply: ReplyError, options: ConnectionOptions
) -> RedisConnectionError | ConnectionSetupError:
    """The typed error for a refused setup command: retryable or a configuration error."""
    describe = describe_command(args)
    message = reply.message
    if options.password:
        message = mask_echoed_secret(message, options.password)
        if message != reply.message:
            reply = ReplyError(message)
    if reply.code in _RETRYABLE_CODES or "max number of clients" in message:
        return HandshakeError(
            f"{message} (retryable: the client waits its backoff before the next attempt)",
            address=connection.address,
            command=describe,
            reply=reply,
        )
    if reply.code in ("WRONGPASS", "NOAUTH"):
        error: ConnectionSetupError = AuthenticationError(message)
        error.setup_hint = "check the user name and password in the URL"
    else:
        error = ConnectionSetupError(message)
        error.setup_hint = (
            "the server refused the connection setup: check the URL's database and the "
            "ACL rights of its user (HELLO, SELECT, CLIENT SETNAME and PING are needed)"
        )
    error.with_context(describe, connection.address)
    return error


def _is_unknown_command(error: ReplyError) -> bool:
    text = error.message.lower()
    return error.code == "NOPROTO" or "unknown command" in text


def _raise_setup_errors(
    connection: Connection,
    commands: Sequence[Command],
    replies: Sequence[Any],
    options: ConnectionOptions,
) -> None:
    for args, reply in zip(commands, replies, strict=True):
        if isinstance(reply, ReplyError) and args not in LIBRARY:
            raise _setup_error(connection, args, reply, options)


__all__ = ["Connection", "RedisProtocolError", "open_connection"]
