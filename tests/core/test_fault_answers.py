"""``host.answered()``: faults the server's silence caused clear when it answers again, those it
answered with an error do not (see ``trio_streams/host.py``)."""

from __future__ import annotations

import logging

import trio

from trio_streams.host import Fault, SubscriptionHost
from trio_streams.routing import SubscriberOptions
from trio_streams.transport import SourceFault


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
