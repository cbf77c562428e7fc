"""A Trio TCP proxy in front of a real Redis server that injects the faults production brings.

Point the app under test at :attr:`FaultProxy.url` instead of the server's, then cut, stall,
delay, drip or refuse its connections, on demand or on a seeded :class:`FaultSchedule`, for all
connections or only those a predicate matches (:func:`issued`, :func:`named`)::

    with RedisServer() as server:
        async with FaultProxy.in_front_of(server, seed=7) as proxy:
            app.broker(RedisBroker(proxy.url))
            ...
            proxy.cut(match=issued("XREADGROUP"))   # the reading connection, now
            fault = proxy.blackhole()               # the server hangs for everyone
            ...
            fault.heal()

Each connection's two pumps (client→server, server→client) run in a nursery of their own,
inside the proxy's: closing the proxy closes every connection. Each pump holds at most one
chunk (:data:`CHUNK` bytes) at a time, and a blackholed connection simply stops reading, so no
buffer grows with what a client or the server sends.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
from collections import Counter, deque
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Literal, Protocol, Self, final

import trio

from ...core.groups import raise_lone_errors
from .plan import (
    Fault,
    FaultKind,
    FaultSchedule,
    Match,
    ProxyConnection,
    ProxyError,
    ScheduledFault,
    call_match,
    check_count,
    check_match,
    check_seconds,
)
from .resp import CommandCounter, RespError, SeenCommand

__all__ = ["CHUNK", "FaultEvent", "FaultProxy", "ProxyError"]

#: The most bytes a pump reads (and so holds) at a time.
CHUNK = 64 * 1024
#: How many distinct command names a connection's ``issued`` keeps (Redis has fewer).
MAX_ISSUED = 1024
#: How many injections :attr:`FaultProxy.history` keeps (the oldest are dropped).
HISTORY = 100_000

Direction = Literal["to_server", "to_client"]
_Ending = Literal["cut", "reset", "closed"]


@final
@dataclass(frozen=True)
class FaultEvent:
    """One injection: a fault of ``kind`` applied to connection ``connection`` (its index)."""

    kind: FaultKind
    connection: int


class _HasAddress(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class _Link:
    """The I/O side of one connection: its streams and how it ends."""

    def __init__(self, connection: ProxyConnection, client: trio.SocketStream) -> None:
        self.connection = connection
        self.client = client
        self.upstream: trio.SocketStream | None = None
        self.scope = trio.CancelScope()
        self.ending: _Ending | None = None
        self.counter: CommandCounter | None = CommandCounter()

    def is_ending(self) -> bool:
        """Whether a pump decided to end this connection (its last piece may be in flight)."""
        return self.ending is not None

    def end(self, how: _Ending) -> None:
        if self.ending is None:
            self.ending = how
        self.scope.cancel()


class FaultProxy:
    """A TCP proxy from a free loopback port to ``upstream_host:upstream_port`` that injects
    faults into the connections through it.

    Run it with ``async with proxy:`` or ``await nursery.start(proxy.serve)``; it forwards
    bytes unchanged until told otherwise. Faults (each takes ``match``, a predicate on a
    :class:`ProxyConnection`; without it, every connection):

    - :meth:`cut` — close matching connections now (the client reads EOF);
    - :meth:`cut_after` — close each matching connection after N more bytes (both directions)
      or N more commands (the Nth command reaches the server, its reply never reaches the
      client);
    - :meth:`reset_mid_reply` — send part of the next reply, then reset (RST) the connection;
    - :meth:`delay` — hold each chunk, in either direction, for some seconds;
    - :meth:`blackhole` — stop answering: connections stay open, nothing flows (new ones too);
    - :meth:`refuse_new` — reset new connections as soon as they are accepted;
    - :meth:`drip` — send replies a few bytes at a time.

    Each fault checks its arguments when it is called (counts are ints >= 1, times finite
    seconds >= 0, ``match`` a callable) and raises :class:`ProxyError` naming a bad one, so no
    connection ever meets it. A predicate that raises stops the proxy with a
    :class:`ProxyError` (see :meth:`serve`).

    Standing faults return a :class:`Fault` whose ``heal()`` ends it; :meth:`heal` ends all.
    :attr:`injected` counts injections by kind (a fault counts once per connection it hits).
    ``seed`` drives every choice the proxy makes (where a reply is cut by
    :meth:`reset_mid_reply`) and is the default seed of :meth:`run_schedule`.
    """

    def __init__(
        self, upstream_host: str, upstream_port: int, *, seed: int = 0, port: int = 0
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.seed = seed
        self._wanted_port = port
        self._rng = random.Random(seed)
        self._port: int | None = None
        self._faults: list[Fault] = []
        self._links: dict[int, _Link] = {}
        self._next_index = 0
        self._changed = trio.Event()
        self._serving: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._stack: AsyncExitStack | None = None
        self._failure: ProxyError | None = None
        #: The scope of the ``async with proxy`` block, cancelled by a failure of the proxy.
        self._block: trio.CancelScope | None = None
        #: Faults injected, by kind.
        self.injected: Counter[str] = Counter()
        #: Every injection in order (the last :data:`HISTORY`).
        self.history: deque[FaultEvent] = deque(maxlen=HISTORY)
        #: The schedule steps applied by :meth:`run_schedule`, in order.
        self.applied: list[ScheduledFault] = []

    @classmethod
    def in_front_of(cls, server: _HasAddress, *, seed: int = 0, port: int = 0) -> Self:
        """A proxy to ``server`` (anything with ``host`` and ``port``, such as a
        :class:`~trio_streams.testing.servers.RedisServer`)."""
        return cls(server.host, server.port, seed=seed, port=port)

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The loopback port the proxy listens on (once serving)."""
        if self._port is None:
            raise ProxyError("FaultProxy: not serving yet; use `async with proxy` first")
        return self._port

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT``: the URL to give the app under test."""
        return f"redis://{self.host}:{self.port}"

    @property
    def connections(self) -> list[ProxyConnection]:
        """The connections open through the proxy now, oldest first."""
        return [link.connection for link in self._links.values()]

    # -- running -----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled or :meth:`aclose`; ``started`` once listening.

        Cancelling it closes the listener and every connection through the proxy. A ``match=``
        predicate that raises stops the proxy: the connection it was asked about is reset, and
        ``serve`` (so ``async with proxy``, whose block it cancels) raises :class:`ProxyError`
        naming the predicate, with the predicate's error as its cause — a bug of the test is
        never taken for an injected fault."""
        if self._serving is not None:
            raise ProxyError("FaultProxy: serve() called twice; a proxy serves once")
        self._serving = trio.CancelScope()
        try:
            with self._serving:
                listeners = await trio.open_tcp_listeners(self._wanted_port, host=self.host)
                self._port = listeners[0].socket.getsockname()[1]
                async with trio.open_nursery() as nursery:
                    serve = partial(trio.serve_listeners, handler_nursery=nursery)
                    await nursery.start(serve, self._handle, listeners)
                    task_status.started()
        finally:
            self._stopped.set()
            if self._failure is not None:  # wins over the cancellation that ended the serving
                raise self._failure

    def _fail(self, error: ProxyError) -> None:
        """Stop the proxy with ``error`` (the first one wins), raised from :meth:`serve`."""
        if self._failure is None:
            self._failure = error
        if self._block is not None:  # first, so the block meets no reset before it
            self._block.cancel()
        if self._serving is not None:
            self._serving.cancel()

    async def aclose(self) -> None:
        """Stop listening and close every connection; returns once all are closed."""
        if self._serving is None:
            return
        self._serving.cancel()
        await self._stopped.wait()

    async def __aenter__(self) -> Self:
        """Serve in a nursery of the proxy's own, until the block ends (which closes every
        connection through it); a failure of the proxy cancels the block."""
        stack = AsyncExitStack()
        nursery = await stack.enter_async_context(trio.open_nursery())
        try:
            await nursery.start(self.serve)
        except BaseException:
            await stack.aclose()
            raise
        stack.callback(nursery.cancel_scope.cancel)
        self._block = nursery.cancel_scope
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        with raise_lone_errors():  # the block's error (or the proxy's) leaves as itself
            return await stack.__aexit__(exc_type, exc, tb)

    # -- faults --------------------------------------------------------------------------------

    def cut(self, *, match: Match | None = None) -> int:
        """Close the matching connections open now (the client reads EOF; the server sees the
        connection closed). Returns how many were cut."""
        check_match("FaultProxy.cut", match)
        cut = 0
        for link in list(self._links.values()):
            if link.ending is None and (match is None or call_match(match, "cut", link.connection)):
                self._inject("cut", link)
                link.end("cut")
                cut += 1
        return cut

    def cut_after(
        self, *, bytes: int | None = None, commands: int | None = None, match: Match | None = None
    ) -> Fault:
        """Close each matching connection once N more bytes (in both directions) or N more
        commands went through it, counted from now (or from when it opens).

        ``bytes`` cuts at exactly that byte, even inside a command or a reply. ``commands``
        forwards the Nth command to the server, then cuts: the server runs it, the client never
        reads its reply — the case where a client cannot know whether its write happened.
        """
        where = "FaultProxy.cut_after"
        if (bytes is None) == (commands is None):
            raise ProxyError(f"{where}: give exactly one of bytes= or commands=")
        if bytes is not None:
            check_count(where, "bytes", bytes)
        else:
            check_count(where, "commands", commands)
        check_match(where, match)
        kind: FaultKind = "cut_after_bytes" if bytes is not None else "cut_after_commands"
        return self._add(
            Fault(kind, match, self, after_bytes=bytes, after_commands=commands), baseline=True
        )

    def reset_mid_reply(self, *, match: Match | None = None) -> Fault:
        """Reset each matching connection in the middle of its next reply: part of the reply
        (a seeded share of the chunk read from the server) goes out, then an RST (SO_LINGER 0),
        so the client meets a connection reset with half a reply read."""
        check_match("FaultProxy.reset_mid_reply", match)
        return self._add(Fault("reset_mid_reply", match, self))

    def delay(
        self, *, to_server: float = 0.0, to_client: float = 0.0, match: Match | None = None
    ) -> Fault:
        """Hold each chunk for ``to_server`` seconds before it reaches the server and
        ``to_client`` seconds before it reaches the client (latency; the longest delay in
        force applies)."""
        to_server = check_seconds("FaultProxy.delay", "to_server", to_server)
        to_client = check_seconds("FaultProxy.delay", "to_client", to_client)
        check_match("FaultProxy.delay", match)
        return self._add(Fault("delay", match, self, to_server=to_server, to_client=to_client))

    def blackhole(self, *, match: Match | None = None) -> Fault:
        """Stop answering: matching connections (and new ones) stay open and nothing flows
        either way — a hung server or a partition. Once healed, what was held flows on."""
        check_match("FaultProxy.blackhole", match)
        return self._add(Fault("blackhole", match, self))

    def refuse_new(self, *, match: Match | None = None) -> Fault:
        """Reset (RST) every new matching connection as soon as it is accepted; a predicate
        sees only its ``index`` and ``client`` then."""
        check_match("FaultProxy.refuse_new", match)
        return self._add(Fault("refuse_new", match, self))

    def drip(self, *, chunk: int = 1, every: float = 0.001, match: Match | None = None) -> Fault:
        """Send replies to matching connections ``chunk`` bytes at a time, one chunk every
        ``every`` seconds (a slow or congested link)."""
        check_count("FaultProxy.drip", "chunk", chunk)
        every = check_seconds("FaultProxy.drip", "every", every)
        check_match("FaultProxy.drip", match)
        return self._add(Fault("drip", match, self, chunk=chunk, every=every))

    def heal(self) -> None:
        """End every standing fault."""
        for fault in list(self._faults):
            self._remove(fault)

    @property
    def faults(self) -> list[Fault]:
        """The standing faults in force."""
        return list(self._faults)

    async def run_schedule(self, schedule: FaultSchedule, *, match: Match | None = None) -> None:
        """Apply ``schedule``'s plan in real time: each step at its time, healed after its hold.

        Returns once the last step is healed; cancelling it heals the step in force.
        """
        check_match("FaultProxy.run_schedule", match)
        start = trio.current_time()
        for step in schedule.plan():
            await trio.sleep_until(start + step.at)
            fault = self.apply(step, match=match)
            self.applied.append(step)
            if fault is None:
                continue
            try:
                await trio.sleep(step.hold)
            finally:
                fault.heal()

    def apply(self, step: ScheduledFault, *, match: Match | None = None) -> Fault | None:
        """Inject one scheduled fault now; the standing fault (None for a cut)."""
        params: dict[str, Any] = dict(step.params)
        kind = step.kind
        if kind == "cut":
            self.cut(match=match)
            return None
        if kind == "cut_after_bytes":
            return self.cut_after(bytes=int(params["bytes"]), match=match)
        if kind == "cut_after_commands":
            return self.cut_after(commands=int(params["commands"]), match=match)
        if kind == "reset_mid_reply":
            return self.reset_mid_reply(match=match)
        if kind == "delay":
            return self.delay(
                to_server=params["to_server"], to_client=params["to_client"], match=match
            )
        if kind == "blackhole":
            return self.blackhole(match=match)
        if kind == "refuse_new":
            return self.refuse_new(match=match)
        return self.drip(chunk=int(params["chunk"]), every=params["every"], match=match)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _add(self, fault: Fault, *, baseline: bool = False) -> Fault:
        if baseline:
            for index, link in self._links.items():
                fault.baseline[index] = (link.connection.bytes, link.connection.commands)
        self._faults.append(fault)
        self._notify()  # a blackhole holds each open connection at its next chunk
        return fault

    def _remove(self, fault: Fault) -> None:
        fault.healed = True
        if fault in self._faults:
            self._faults.remove(fault)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _inject(self, kind: FaultKind, link: _Link, fault: Fault | None = None) -> None:
        index = link.connection.index
        if fault is not None:
            if index in fault.hit:
                return
            fault.hit.add(index)
        self.injected[kind] += 1
        self.history.append(FaultEvent(kind, index))

    def _active(self, kind: FaultKind, link: _Link) -> list[Fault]:
        return [f for f in self._faults if f.kind == kind and f.matches(link.connection)]

    # -- connections ---------------------------------------------------------------------------

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            peer = client.socket.getpeername()
        except OSError:  # the client left before it was served
            _close(client, reset=False)
            return
        connection = ProxyConnection(self._next_index, (str(peer[0]), int(peer[1])))
        self._next_index += 1
        link = _Link(connection, client)
        try:
            refused = self._active("refuse_new", link)
        except ProxyError as error:  # a predicate raised
            self._fail(error)
            _close(client, reset=True)
            return
        if refused:
            for fault in refused:
                self._inject("refuse_new", link, fault)
            _close(client, reset=True)
            return
        self._links[connection.index] = link
        try:
            with link.scope:
                try:
                    link.upstream = await trio.open_tcp_stream(
                        self.upstream_host, self.upstream_port
                    )
                except OSError:  # the server is down: the client sees its connection reset
                    link.ending = "reset"
                    return
                async with trio.open_nursery() as pumps:
                    pumps.start_soon(self._pump, link, "to_server")
                    pumps.start_soon(self._pump, link, "to_client")
        finally:
            del self._links[connection.index]
            # Closed at once, without a checkpoint: this runs under the proxy's cancellation.
            reset = link.ending == "reset"
            _close(client, reset=reset)
            if link.upstream is not None:
                _close(link.upstream, reset=reset)

    async def _pump(self, link: _Link, direction: Direction) -> None:
        """Copy one direction chunk by chunk until EOF; either side closing ends both."""
        assert link.upstream is not None
        source, target = link.client, link.upstream
        if direction == "to_client":
            source, target = target, source
        try:
            while True:
                await self._flowing(link)
                data = await source.receive_some(CHUNK)
                if not data:
                    break
                await self._flowing(link)
                await self._forward(link, direction, target, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except ProxyError as error:  # a predicate raised: stop the proxy with it
            self._fail(error)
            link.end("reset")
            return
        link.end("closed")

    async def _flowing(self, link: _Link) -> None:
        """Return once no blackhole holds this connection (at once if none does)."""
        while True:
            holes = self._active("blackhole", link)
            if not holes:
                return
            for fault in holes:
                self._inject("blackhole", link, fault)
            await self._changed.wait()

    async def _forward(
        self, link: _Link, direction: Direction, target: trio.SocketStream, data: bytes
    ) -> None:
        if link.ending is not None:
            await trio.sleep_forever()  # the pump ending the connection cancels this one
        connection = link.connection
        commands: deque[SeenCommand] = deque()
        if direction == "to_server" and link.counter is not None:
            try:
                commands.extend(link.counter.feed(data))
            except RespError:
                link.counter = None  # not RESP: forward as it comes, count nothing more
        else:
            resets = self._active("reset_mid_reply", link)
            if resets and len(data) >= 2:
                part = self._rng.randint(1, len(data) - 1)
                for fault in resets:
                    self._inject("reset_mid_reply", link, fault)
                link.ending = "reset"
                await self._send(link, direction, target, data[:part], ending=True)
                link.end("reset")
                await trio.lowlevel.checkpoint()
                return
        at = 0
        while at < len(data):
            if link.is_ending():
                await trio.sleep_forever()  # the pump ending the connection cancels this one
            stop = commands[0].end if commands else len(data)
            budget = self._bytes_budget(link)
            if budget is not None:
                stop = min(stop, at + budget)
            piece = data[at:stop]
            # Counted before it is sent: once the peer has it, the count includes it.
            if direction == "to_server":
                connection.bytes_to_server += len(piece)
            else:
                connection.bytes_to_client += len(piece)
            at = stop
            if commands and commands[0].end == at:
                self._note(connection, commands.popleft())
            # Decided before the piece goes out, so the other direction forwards nothing more
            # (the reply to a cut command never reaches the client).
            cutting = self._cut_due(link)
            if piece:
                await self._send(link, direction, target, piece, ending=cutting)
            else:  # nothing moved this turn: never spin without a checkpoint
                await trio.lowlevel.checkpoint()
            if cutting:
                link.end("cut")
                await trio.lowlevel.checkpoint()
                return

    def _note(self, connection: ProxyConnection, command: SeenCommand) -> None:
        connection.commands += 1
        if command.name and len(connection.issued) < MAX_ISSUED:
            connection.issued.add(command.name)
        client_name = command.client_name
        if client_name is not None:
            connection.name = client_name
        self._notify()

    def _bytes_budget(self, link: _Link) -> int | None:
        """Bytes the connection may still forward before a cut_after(bytes=) fires."""
        budgets = []
        for fault in self._active("cut_after_bytes", link):
            assert fault.after_bytes is not None
            base = fault.baseline.get(link.connection.index, (0, 0))[0]
            budgets.append(max(0, base + fault.after_bytes - link.connection.bytes))
        return min(budgets) if budgets else None

    def _cut_due(self, link: _Link) -> bool:
        """Whether a cut_after fault ends the connection after the piece being forwarded (and
        if so, mark it ending); False once another pump is ending it."""
        if link.ending is not None:
            return False
        connection = link.connection
        for fault in self._active("cut_after_bytes", link) + self._active(
            "cut_after_commands", link
        ):
            base_bytes, base_commands = fault.baseline.get(connection.index, (0, 0))
            if fault.after_bytes is not None:
                due = connection.bytes - base_bytes >= fault.after_bytes
            else:
                assert fault.after_commands is not None
                due = connection.commands - base_commands >= fault.after_commands
            if due:
                self._inject(fault.kind, link, fault)
                link.ending = "cut"
                return True
        return False

    async def _send(
        self,
        link: _Link,
        direction: Direction,
        target: trio.SocketStream,
        piece: bytes,
        *,
        ending: bool = False,
    ) -> None:
        """Send ``piece`` after the delays in force; nothing once the connection is ending,
        unless this is the last piece of the pump that ends it."""
        if link.ending is not None and not ending:
            await trio.sleep_forever()  # the pump ending the connection cancels this one
        delays = [getattr(f, direction) for f in self._active("delay", link)]
        delay = max(delays, default=0.0)
        if delay > 0:
            for fault in self._active("delay", link):
                if getattr(fault, direction) > 0:
                    self._inject("delay", link, fault)
            await trio.sleep(delay)
        drips = self._active("drip", link) if direction == "to_client" else []
        if not drips:
            await target.send_all(piece)
            return
        for fault in drips:
            self._inject("drip", link, fault)
        chunk = min(f.chunk for f in drips)
        every = max(f.every for f in drips)
        for start in range(0, len(piece), chunk):
            await trio.sleep(every)
            if link.ending is not None and not ending:
                await trio.sleep_forever()
            await target.send_all(piece[start : start + chunk])


def _close(stream: trio.SocketStream, *, reset: bool) -> None:
    """Close now; with ``reset``, with SO_LINGER 0 so the peer gets an RST, not a FIN (a
    connection reset)."""
    if reset:
        with contextlib.suppress(OSError):
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()
