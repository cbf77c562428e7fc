"""The transport conformance suite, for any transport: each sentence of the contract between the
core and a transport, stated once as a test.

Run it on your own transport the way Trio's ``trio.testing.check_one_way_stream`` checks a
stream: describe the transport once, in a subclass of :class:`TransportUnderTest`, and have
pytest collect a subclass of :class:`ConformanceTests` that names it::

    from trio_streams.testing.conformance import Capability, ConformanceTests, TransportUnderTest

    class Mine(TransportUnderTest):
        name = "mine"  # the pytest id: test_...[mine]
        cannot = {Capability.SEEK: "my server has no positions to seek to"}

        def broker(self) -> Broker:
            return MyBroker(...)  # fresh: nothing shared with an earlier test

        async def append(self, broker: Broker, stream: str, payload: bytes) -> None:
            ...  # write one message before the app runs, through a client of your own

        def live_source(self, streams: tuple[str, ...], start_at: Position | None) -> Source:
            return MySource(*streams, start_at=start_at)

    class TestMine(ConformanceTests):
        transports = [Mine]

Every test of the suite then runs once per transport in ``transports``. A test that needs a
:class:`Capability` the transport declares in ``cannot`` is skipped with the reason given
there; one that uses a capability without declaring it fails rather than skips, and the suite
checks the declarations where it can (:class:`Capabilities` says which: ``SEEK`` against the
sources' ``seekable``, ``REPLAY``, ``PIN_INSTANTS`` and ``RETAIN`` against the methods they need,
``POSITIONS`` declared missing against a live source asked to start at a position,
``RETRY_COPIES`` against what a retry writes). Refusals
are checked by their type, never by their words. The areas are also classes of their own
(:class:`Reading`, :class:`Settling`, :class:`RetrySemantics`, :class:`Seeking`,
:class:`Shutdown`, :class:`Backpressure`, :class:`Capabilities`), for a project that runs only
some of them.

The tests are ``async def`` tests for pytest-trio, with ``trio_mode = true`` in the project's
pytest configuration; each gets a fresh :class:`TransportUnderTest` made with its ``tmp_path``.
Importing ``trio_streams.testing`` does not import this module: only a test module that uses
the suite pays for pytest and the suite.
"""

from __future__ import annotations

import pytest

# Have pytest rewrite the suite's assertions (they say what failed): before they are imported.
pytest.register_assert_rewrite(
    *(
        f"trio_streams.testing.conformance.{name}"
        for name in (
            "backpressure",
            "capabilities",
            "reading",
            "retries",
            "seeking",
            "settling",
            "shutdown",
        )
    )
)

from .backpressure import Backpressure  # noqa: E402
from .capabilities import Capabilities  # noqa: E402
from .reading import Reading  # noqa: E402
from .retries import RetrySemantics  # noqa: E402
from .seeking import Seeking  # noqa: E402
from .settling import Settling  # noqa: E402
from .shutdown import Shutdown  # noqa: E402
from .subject import Capability, Message, TransportUnderTest, needs  # noqa: E402
from .suite import TransportSuite  # noqa: E402

__all__ = [
    "Backpressure",
    "Capabilities",
    "Capability",
    "ConformanceTests",
    "Message",
    "Reading",
    "RetrySemantics",
    "Seeking",
    "Settling",
    "Shutdown",
    "TransportSuite",
    "TransportUnderTest",
    "needs",
]


class ConformanceTests(
    Capabilities, Reading, Settling, RetrySemantics, Seeking, Shutdown, Backpressure
):
    """Every test of the suite. Subclass it as ``Test...`` with ``transports`` set to your
    :class:`TransportUnderTest` subclasses, and pytest runs each test on each of them."""
