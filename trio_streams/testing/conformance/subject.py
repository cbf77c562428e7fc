"""What the conformance suite needs from a transport: :class:`TransportUnderTest`.

A test asks its ``transport`` fixture for an app with a broker of that transport, preloads
stream ``"s"`` with messages whose payload is their sequence number (so ``seen`` lists read like
positions), and mounts the sources it makes (``transport.live()`` / ``transport.replay()``).

A transport declares, in ``cannot``, each :class:`Capability` it lacks and why. A test that
needs a capability says so with ``@needs(Capability...)``: the fixture skips it, with the
transport's reason, where the capability is declared missing. A test that uses a capability it
did not declare fails instead of skipping, so nothing is skipped silently, and the suite checks
the declarations it can (see :mod:`.capabilities`); the others rest on the transport's word.
"""

from __future__ import annotations

import enum
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ...core.app import App
from ...core.broker import Broker
from ...core.destinations import Destination
from ...core.positions import Position
from ...core.transport import Source

__all__ = ["MARKER", "Capability", "Message", "TransportUnderTest", "needs"]

#: The pytest marker ``needs`` puts on a test (registered by the trio-streams pytest plugin).
MARKER = "conformance_needs"

#: A message as the suite reads it back: (payload, headers).
Message = tuple[bytes, dict[str, str]]


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
    #: ``retry()`` writes a copy of the message to its stream (its retry count advanced, naming
    #: the subscription it is for), which that subscription reads again. A stream-file consumer
    #: group writes none: its member runs the message again, and a delayed one waits in the
    #: group's state.
    RETRY_COPIES = "retry by writing a copy of the message to its stream"
    #: A ``retry_after`` delay runs on Trio's clock (a timer of the subscription, or a lane
    #: waiting). A transport that keeps delayed retries durably, for every process (a
    #: stream-file group's state), times them by the wall clock, which an autojump clock does
    #: not move.
    TRIO_CLOCK_DELAYS = "time a retry_after delay on Trio's clock"


def needs(*capabilities: Capability) -> pytest.MarkDecorator:
    """Mark a test as needing ``capabilities``: it is skipped, with the transport's reason, on
    a transport that declares one of them missing."""
    mark: pytest.MarkDecorator = getattr(pytest.mark, MARKER)
    return mark(*capabilities)


class TransportUnderTest(ABC):
    """One transport as the conformance tests see it: subclass it for your transport.

    Provide ``name``, :meth:`broker`, :meth:`append` and :meth:`live_source`, and declare in
    ``cannot`` what the transport cannot do (each :class:`Capability` with the reason a skipped
    test reports). Each capability it can do may need one more method: ``REPLAY``
    :meth:`replay_source`, ``PIN_INSTANTS`` :meth:`append_at`, ``RETAIN`` :meth:`messages` and
    :meth:`broker_like`, ``SEEK`` :meth:`past_the_end_refusal`.

    One instance serves one test: it is made with the test's ``tmp_path`` and closed
    (:meth:`close`) at its teardown.
    """

    #: The pytest id of the parameter (``test_...[name]``).
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

    # ---- what a transport provides -----------------------------------------------------------

    @abstractmethod
    def broker(self) -> Broker:
        """A fresh broker of this transport (nothing shared with earlier ones)."""

    def broker_like(self, broker: Broker) -> Broker:
        """A new broker over the same streams as ``broker`` (as another service would open)."""
        raise NotImplementedError(f"{self.name} cannot open a second broker on its streams")

    @abstractmethod
    async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
        """Write one message to ``stream`` of ``broker``'s streams, before its app runs (the
        broker is not connected: write through a client of your own)."""

    async def append_at(self, broker: Broker, stream: str, payload: bytes, at_ms: int) -> None:
        """As :meth:`append`, written at the instant ``at_ms`` (epoch ms): ``PIN_INSTANTS``."""
        raise NotImplementedError(f"{self.name} declares that it can pin instants but cannot")

    async def messages(self, broker: Broker, stream: str) -> list[Message]:
        """Every message in ``stream`` now, as (payload, headers), in order: ``RETAIN``."""
        raise NotImplementedError(f"{self.name} declares that it keeps messages but cannot")

    @abstractmethod
    def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        """A live subscription's source: it starts at the tip (or ``start_at``) and follows."""

    def replay_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
        """A replay's source: from the beginning (or ``start_at``) to the last message. The
        replay tests size reads with the ``count=`` subscriber option (messages per read), so a
        broker that replays accepts it."""
        raise NotImplementedError(f"{self.name} declares that it can replay but cannot")

    def preloaded_position(self, n: int) -> Position:
        """The position of the ``n``-th message :meth:`preload` wrote on stream ``s``, as a
        handler seeks to it: ``Position.sequence(n)`` by default. A transport that addresses
        messages otherwise (Redis streams, by entry id) names it its way."""
        return Position.sequence(n)

    def past_the_end_refusal(self, *, asked: int, last: int) -> tuple[str, ...]:
        """Fragments the refusal of ``sequence(asked)`` on stream ``s`` (whose last sequence is
        ``last``) must contain: it says why, and where. None by default."""
        del asked, last
        return ()

    def to(self, name: str) -> str | Destination:
        """What the tests publish to for ``name``: a stream, or what this transport's
        ``live(name)`` reads (a Pub/Sub channel)."""
        return name

    def dead_letters(self, name: str) -> Source:
        """A live source reading the dead letters sent to ``dead_letter=name``: a stream."""
        return self.live(name)

    async def dead_lettered(self, broker: Broker, name: str) -> list[Message]:
        """Every dead letter in ``name`` (a ``dead_letter=`` destination: a stream, kept on
        every transport), as ``messages`` gives them."""
        return await self.messages(broker, name)

    # ---- what the tests use ------------------------------------------------------------------

    def app(self, name: str = "conformance", **options: Any) -> tuple[App, Broker]:
        """An app (``options`` are ``App``'s) with one fresh broker of this transport."""
        app = App(name, **options)
        return app, app.broker(self.broker())

    async def preload(self, broker: Broker, count: int, *, stream: str = "s") -> None:
        """Write ``count`` messages to ``stream``, payloads 1..count: each its sequence number."""
        for n in range(1, count + 1):
            await self.append(broker, stream, str(n).encode())

    async def preload_json(
        self, broker: Broker, values: Sequence[Any], *, stream: str = "s"
    ) -> None:
        """Write each of ``values`` to ``stream``, JSON-encoded."""
        for value in values:
            await self.append(broker, stream, json.dumps(value).encode())

    async def preload_at(
        self, broker: Broker, instants: Sequence[int], *, stream: str = "s"
    ) -> None:
        """As ``preload``, the n-th message written at ``instants[n - 1]`` (epoch ms)."""
        self.require(Capability.PIN_INSTANTS)
        for n, at_ms in enumerate(instants, 1):
            await self.append_at(broker, stream, str(n).encode(), at_ms)

    def live(self, *streams: str, start_at: Position | None = None) -> Source:
        """A live source of ``streams`` (``"s"`` by default)."""
        return self.live_source(streams or ("s",), start_at)

    def replay(self, *streams: str, start_at: Position | None = None) -> Source:
        """A replay source of ``streams`` (``"s"`` by default): the test needs ``REPLAY``."""
        self.require(Capability.REPLAY)
        return self.replay_source(streams or ("s",), start_at)

    def __repr__(self) -> str:
        return f"<{self.name} transport>"
