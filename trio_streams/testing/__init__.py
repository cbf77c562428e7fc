"""Testing support: run an app on in-process transports and assert on what it did.

``async with app.test() as t`` (or the pytest plugin's ``app_client`` fixture) gives a
``TestClient``; see ``trio_streams.testing.harness``.
"""

import sys

if "pytest" in sys.modules:
    # Under pytest, have it rewrite the harness's assertions; this must come before the harness
    # is imported (the plugin entry point imports this package first).
    import pytest

    pytest.register_assert_rewrite("trio_streams.testing.harness")

from .harness import HandlerRecord, NotSettled, PublishedMessage, TestClient

__all__ = ["HandlerRecord", "NotSettled", "PublishedMessage", "TestClient"]
