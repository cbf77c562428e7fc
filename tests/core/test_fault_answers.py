"""``host.answered()``: faults the server's silence caused clear when it answers again, those it
answered with an error do not (see ``trio_streams/core/host.py``)."""

from __future__ import annotations

import logging

import pytest
import trio

from trio_streams.core.host import Fault, SubscriptionHost
from trio_streams.core.routing import SubscriberOptions
from trio_streams.core.transport import SourceFault


def _host(nursery: trio.Nursery, changes: list[Fault]) -> SubscriptionHost:
    return SubscriptionHost(
        "sub",
        SubscriberOptions(),
        nursery,
        logger=logging.getLogger("tests.fault_answers"),
        on_fault=changes.append,
    )


def _caused_by(error: BaseException) -> SourceFault:
    try:
        raise SourceFault("flush", f"flush failed: {error}") from error
    except SourceFault as fault:
        return fault


async def test_faults_of_silence_clear_when_the_server_answers_and_refusals_stay() -> None:
    changes: list[Fault] = []
    async with trio.open_nursery() as nursery:
        host = _host(nursery, changes)
        host.report_fault("connection", "lost", error=ConnectionResetError("reset"))
        host.report_fault("flush", "timed out", error=_caused_by(TimeoutError("1 s")))
        host.report_fault("lease", "timed out", error=TimeoutError("no reply"))
        host.report_fault("settle", "refused", error=_caused_by(PermissionError("NOPERM")))
        host.report_fault("nogroup", "vanished")
        host.answered()
        assert sorted(host.active) == ["nogroup", "settle"]
        cleared = sorted(c.kind for c in changes if c.cleared)
        assert cleared == ["connection", "flush", "lease"]
        host.answered()  # nothing more to clear: no change is told twice
        assert len(changes) == 8


async def test_a_settle_fault_cleared_by_an_answer_says_how_many_settles_failed_meanwhile(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tests.fault_answers")
    changes: list[Fault] = []
    async with trio.open_nursery() as nursery:
        host = _host(nursery, changes)
        down = _caused_by(ConnectionRefusedError("refused"))
        for _ in range(6):
            host.report_fault(
                "settle", "retry failed", error=down, left="the entries stayed pending"
            )
        host.report_fault("lease", "renewal failed", error=down)
        host.answered()
        host.report_fault("settle", "retry failed", error=down, left="the entries stayed pending")
        host.clear_fault("settle")  # a new fault: counted from one again
    cleared = [r.getMessage() for r in caplog.records if "cleared" in r.getMessage()]
    assert cleared == [
        "sub: fault 'settle' cleared after 6 failed settles; the entries stayed pending",
        "sub: fault 'lease' cleared",
        "sub: fault 'settle' cleared after 1 failed settle; the entries stayed pending",
    ]
    began = [r.getMessage() for r in caplog.records if "fault 'settle':" in r.getMessage()]
    assert len(began) == 2  # once for each fault, not for each failed settle
