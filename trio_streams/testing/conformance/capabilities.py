"""What each transport declares it cannot do must be true: a false declaration would skip
contract tests that should run (or run tests that can only fail).

What can be checked is: ``SEEK`` against the sources' ``seekable``; ``REPLAY`` and
``PIN_INSTANTS`` against the methods they need (declared missing, the method must not be
there; declared, it must); ``RETAIN`` declared against its methods; ``POSITIONS`` declared
missing against a live source asked to start at a position, which must be refused;
``RETRY_COPIES``, where the transport keeps messages, against what a ``retry()`` writes.
``FAN_OUT``, ``VIRTUAL_TIME``, ``TRIO_CLOCK_DELAYS`` and ``RETAIN`` declared missing rest on
the declaration.
"""

from __future__ import annotations

import pytest
import trio

from trio_streams import RETRY_COUNT_HEADER, Context, Outcome, Position, ack, retry

from ._running import serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite

#: The methods of :class:`TransportUnderTest` each capability needs, only there.
METHODS: dict[Capability, tuple[str, ...]] = {
    Capability.REPLAY: ("replay_source",),
    Capability.PIN_INSTANTS: ("append_at",),
    Capability.RETAIN: ("messages", "broker_like"),
}

#: The capabilities whose methods, present while the capability is declared missing, show the
#: declaration false (a transport that keeps nothing may still read its dead letters back).
ONLY_FOR = (Capability.REPLAY, Capability.PIN_INSTANTS)


def provides(transport: TransportUnderTest, method: str) -> bool:
    """Whether ``transport``'s class provides ``method`` (overrides the default, which says it
    cannot)."""
    return getattr(type(transport), method) is not getattr(TransportUnderTest, method)


class Capabilities(TransportSuite):
    """What a transport declares it cannot do is true, and each says why."""

    def test_declared_capabilities_match_the_sources(self, transport: TransportUnderTest) -> None:
        declared = "declares it can" if transport.can(Capability.SEEK) else "declares it cannot"
        said = f"{transport.name} {declared} {Capability.SEEK.value} (SEEK)"
        assert transport.can(Capability.SEEK) is transport.live("s").seekable, (
            f"{said}, but its live source says seekable={transport.live('s').seekable}"
        )
        if transport.can(Capability.REPLAY):
            transport.needed = frozenset({Capability.REPLAY})
            assert transport.replay("s").seekable is transport.can(Capability.SEEK), (
                f"{said}, but its replay source says seekable={transport.replay('s').seekable}"
            )

    def test_declared_capabilities_match_the_methods_they_need(
        self, transport: TransportUnderTest
    ) -> None:
        for capability, methods in METHODS.items():
            for method in methods:
                if transport.can(capability):
                    assert provides(transport, method), (
                        f"{transport.name} can {capability.value} (it does not declare "
                        f"{capability.name} in `cannot`), but provides no `{method}`"
                    )
                elif capability in ONLY_FOR:
                    assert not provides(transport, method), (
                        f"{transport.name} declares it cannot {capability.value} "
                        f"({capability.name} in `cannot`), yet provides `{method}`: the tests "
                        "that need it are skipped by a declaration that is not true"
                    )

    def test_a_transport_declared_unable_to_start_at_a_position_refuses_one(
        self, transport: TransportUnderTest
    ) -> None:
        if transport.can(Capability.POSITIONS):
            return
        _, broker = transport.app("positions")
        try:
            source = transport.live_source(("s",), Position.sequence(1))
            broker.subscriber(source, name="positioned")(_handle)
        except (Exception, pytest.fail.Exception):  # noqa: BLE001 - any refusal, in any words
            return  # refused: by the source, the broker mounting it, or the transport's test
        pytest.fail(
            f"{transport.name} declares it cannot {Capability.POSITIONS.value} (POSITIONS in "
            "`cannot`), yet a live source made with start_at=Position.sequence(1) was made and "
            "mounted: refuse the position (a ConfigurationError), or drop the declaration"
        )

    @needs(Capability.RETAIN)
    async def test_a_retry_writes_a_copy_to_the_stream_exactly_where_the_transport_says_so(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("copies")
        again = trio.Event()

        @broker.subscriber(transport.live("s"), name="sub")
        async def handle(n: int, ctx: Context) -> Outcome:
            if ctx.attempt == 1:
                return retry()
            again.set()
            return ack()

        async with serving(app):
            await broker.publish(transport.to("s"), 1)
            with trio.fail_after(10):
                await again.wait()
        copies = [m for m in await transport.messages(broker, "s") if RETRY_COUNT_HEADER in m[1]]
        declared = transport.can(Capability.RETRY_COPIES)
        assert len(copies) == (1 if declared else 0), (
            f"{transport.name} {'does not declare' if declared else 'declares'} "
            f"RETRY_COPIES in `cannot`, yet a retry() wrote {len(copies)} copies to the stream"
        )

    def test_every_declared_limitation_gives_a_reason(self) -> None:
        for kind in self.transports:
            for capability, reason in kind.cannot.items():
                assert isinstance(capability, Capability) and reason.strip(), kind.name

    def test_using_a_capability_without_declaring_it_fails_rather_than_skips(
        self, transport: TransportUnderTest
    ) -> None:
        with pytest.raises(pytest.fail.Exception, match="without declaring @needs"):
            transport.replay("s")


async def _handle(message: bytes) -> None:
    """A handler for a subscription that is mounted, never run."""
