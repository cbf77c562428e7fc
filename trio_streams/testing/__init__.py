"""Testing support: run an app on in-process transports and assert on what it did.

``async with app.test() as t`` (or the pytest plugin's ``app_client`` fixture) gives a
``TestClient``; see ``trio_streams.testing.harness``. The names below are imported from the
harness the first time one is used, so the pytest plugin, which pytest loads with this package
in every run, costs nothing until a test uses it. A transport is checked against the contract
with ``trio_streams.testing.conformance``, which is imported on its own (it needs pytest).
"""

import sys

if "pytest" in sys.modules:
    # Under pytest, have it rewrite the harness's assertions; this must come before the harness
    # is imported (the plugin entry point imports this package first).
    import pytest

    pytest.register_assert_rewrite("trio_streams.testing.harness")

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    from .harness import HandlerRecord, NotSettled, PublishedMessage, TestClient

__all__ = ["HandlerRecord", "NotSettled", "PublishedMessage", "TestClient"]

if not TYPE_CHECKING:  # type checkers see the import above

    def __getattr__(name: str) -> object:
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from . import harness

        value = getattr(harness, name)
        globals()[name] = value  # imported once: later uses are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
