"""The pytest plugin (entry point ``trio_streams``), loaded wherever trio-streams is installed.

Define an ``app`` fixture returning your App and ask for ``app_client``: each test gets the app
running on in-process transports, shut down gracefully afterwards. Tests run under pytest-trio
(``trio_mode = true``), so ``autojump_clock`` makes ``retry_after`` and timeouts instant::

    @pytest.fixture
    def app() -> App:
        return myservice.app

    async def test_totals(app_client: TestClient) -> None:
        await app_client.publish("orders", Order(1, 2.0))
        assert app_client.handler(total).outcomes == [ack()]

It also registers the marker of the transport conformance suite
(:mod:`trio_streams.testing.conformance`), so a project running the suite under
``--strict-markers`` needs no configuration for it.

pytest loads this module in every run, whether or not a test uses trio-streams: it imports
neither Trio nor the framework until a test asks for ``app_client``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    from .harness import TestClient


def pytest_configure(config: pytest.Config) -> None:
    """Register the conformance suite's marker (the name is the suite's ``MARKER``; the suite
    itself is not imported here)."""
    config.addinivalue_line(
        "markers",
        "conformance_needs(*capabilities): the conformance test needs these transport "
        "capabilities (trio_streams.testing.conformance.needs)",
    )


@pytest.fixture
async def app_client(request: pytest.FixtureRequest) -> AsyncIterator[TestClient]:
    """The ``app`` fixture's App, running on in-process transports for one test."""
    from ..core.app import App

    try:
        app = request.getfixturevalue("app")
    except pytest.FixtureLookupError:
        raise pytest.UsageError(
            "app_client needs an `app` fixture that returns your trio_streams.App"
        ) from None
    if not isinstance(app, App):
        raise pytest.UsageError(f"the `app` fixture returned {app!r}, not a trio_streams.App")
    async with app.test() as client:
        yield client
