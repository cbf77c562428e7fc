"""What each transport declares it cannot do must be true: a false declaration would skip
contract tests that should run (or run tests that can only fail)."""

from __future__ import annotations

import pytest

from .subject import Capability, TransportUnderTest
from .suite import TransportSuite


class Capabilities(TransportSuite):
    """What a transport declares it cannot do is true, and each says why."""

    def test_declared_capabilities_match_the_sources(self, transport: TransportUnderTest) -> None:
        assert transport.can(Capability.SEEK) is transport.live("s").seekable
        if transport.can(Capability.REPLAY):
            transport.needed = frozenset({Capability.REPLAY})
            assert transport.replay("s").seekable is transport.can(Capability.SEEK)

    def test_every_declared_limitation_gives_a_reason(self) -> None:
        for kind in self.transports:
            for capability, reason in kind.cannot.items():
                assert isinstance(capability, Capability) and reason.strip(), kind.name

    def test_using_a_capability_without_declaring_it_fails_rather_than_skips(
        self, transport: TransportUnderTest
    ) -> None:
        with pytest.raises(pytest.fail.Exception, match="without declaring @needs"):
            transport.replay("s")
