"""Testing support: run an app on in-process transports and assert on what it did.

``async with app.test() as t`` (or the pytest plugin's ``app_client`` fixture) gives a
``TestClient``; see ``trio_streams.testing.harness``.
"""

from .harness import HandlerRecord, NotSettled, PublishedMessage, TestClient

__all__ = ["HandlerRecord", "NotSettled", "PublishedMessage", "TestClient"]
