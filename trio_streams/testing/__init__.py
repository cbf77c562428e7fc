"""Testing support: run an app on in-process transports and assert on what it did.

``async with app.test() as t`` (or the pytest plugin's ``app_client`` fixture) gives a
``TestClient``; see ``trio_streams.testing.harness``. A transport is checked against the
contract with ``trio_streams.testing.conformance``, which is imported on its own (it needs
pytest).
"""

import sys

if "pytest" in sys.modules:
    # Under pytest, have it rewrite the harness's assertions; this must come before the harness
    # is imported (the plugin entry point imports this package first).
    import pytest

    pytest.register_assert_rewrite("trio_streams.testing.harness")

from .harness import HandlerRecord, NotSettled, PublishedMessage, TestClient

__all__ = ["HandlerRecord", "NotSettled", "PublishedMessage", "TestClient"]
