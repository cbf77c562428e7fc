"""The ``transport`` fixture every conformance test takes, parametrised over a class's
``transports``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from .subject import MARKER, Capability, TransportUnderTest

__all__ = ["TransportSuite"]


class TransportSuite:
    """Base of the suite's test classes: each test runs once per class in ``transports``,
    with the class's ``name`` as its pytest id, and is skipped (saying why) on a transport that
    declares a capability it needs missing."""

    #: The transports each test runs on (set by the subclass that pytest collects).
    transports: ClassVar[Sequence[type[TransportUnderTest]]] = ()

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "transport" in metafunc.fixturenames:
            kinds = list(self.transports)
            if not kinds:
                raise pytest.UsageError(
                    f"{metafunc.cls.__name__ if metafunc.cls else 'the suite'} runs on no "
                    "transport: set its `transports` to your TransportUnderTest subclasses"
                )
            metafunc.parametrize(
                "transport", kinds, ids=[kind.name for kind in kinds], indirect=True
            )

    @pytest.fixture
    def transport(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[TransportUnderTest]:
        kind: type[TransportUnderTest] = request.param
        chosen = kind(tmp_path)
        needed: set[Capability] = set()
        for marker in request.node.iter_markers(MARKER):
            needed.update(marker.args)
        chosen.skip_unless_able(frozenset(needed))
        try:
            yield chosen
        finally:
            chosen.close()
