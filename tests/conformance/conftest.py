"""The ``transport`` fixture: every conformance test runs once per transport in ``TRANSPORTS``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .transports import TRANSPORTS, Capability, Transport


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "needs(*capabilities): the test needs these transport capabilities"
    )


@pytest.fixture(params=list(TRANSPORTS))
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Transport]:
    name: str = request.param
    chosen = TRANSPORTS[name](tmp_path)
    needed: set[Capability] = set()
    for marker in request.node.iter_markers("needs"):
        needed.update(marker.args)
    chosen.skip_unless_able(frozenset(needed))
    try:
        yield chosen
    finally:
        chosen.close()
