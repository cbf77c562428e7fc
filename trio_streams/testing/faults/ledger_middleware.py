"""``ledger_middleware``: every handler run of an app, and its settle, written to a ledger.

Give it to the app (``App(..., middlewares=[ledger_middleware(ledger, id_of=...)])``), a broker
or one subscriber; the handlers stay as they are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ...core.delivery import Delivery
from ...core.middleware import HandlerCall, Middleware
from ...core.outcome import OutcomeKind
from ._ledger_history import Id, LedgerError
from .ledger import Ledger, RunOutcome

__all__ = ["LedgerMiddleware", "ledger_middleware"]

_ENDS: dict[OutcomeKind, RunOutcome] = {
    OutcomeKind.ACK: "ack",
    OutcomeKind.DROP: "drop",
    OutcomeKind.RETRY: "retry",
    OutcomeKind.RETRY_AFTER: "retry",
}


class LedgerMiddleware(Middleware):
    """Writes ``run_began`` as each delivery's handling begins, ``run_ended`` with its
    outcome once it is decided (before the transport settles it: ``HandlerCall.on_decided``),
    and ``settled`` once the transport settled it for good.

    - The run is recorded when the middleware is entered, before the payload is decoded: the
      latest point before the handler that a middleware sees. A delivery the handler is then
      not called for (it was spent, or could not be decoded) is ended ``"not-run"`` and does
      not count as a run. A process killed in between leaves a run on record, as it would
      for a kill inside the handler.
    - A handling cancelled under way (a hard stop) ends ``"cancelled"``: the run counts, and
      a later run of the message is a duplicate, as after a crash.
    - ``settled`` is written when the framework settled the delivery: ``"dead-letter"`` when
      its verdict went to a dead letter, ``"ack"`` or ``"drop"`` otherwise (a retry is not a
      settle for good: the message comes back). On a transport that batches its
      acknowledgements this is when the acknowledgement was queued; a process killed before
      the batch reached the server has the message delivered again, which shows as a
      duplicate, never as a loss.
    """

    def __init__(self, ledger: Ledger, id_of: Callable[[Delivery], Id]) -> None:
        self.ledger = ledger
        self.id_of = id_of

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        delivery = call.delivery
        try:
            ident = self.id_of(delivery)
        except Exception as exc:
            raise LedgerError(
                f"ledger {self.ledger.path}: id_of failed on a delivery of "
                f"{call.subscription!r} at {delivery.position!r}: {exc!r}"
            ) from exc
        attempt = delivery.attempt
        ledger = self.ledger
        ledger.run_began(ident, attempt)
        ended: list[RunOutcome] = []

        def decided(call: HandlerCall) -> None:
            # Before the settle: a process killed while the transport settles (or before its
            # acknowledgement is flushed) leaves a run that ended, as it did.
            if not ended:
                outcome = call.outcome
                ended.append(
                    "not-run" if not call.called or outcome is None else _ENDS[outcome.kind]
                )
                ledger.run_ended(ident, ended[0], attempt=attempt)

        call.on_decided.append(decided)
        try:
            yield
        except BaseException:
            if not ended:  # cut short under way (a hard stop): the run counts
                ledger.run_ended(ident, "cancelled", attempt=attempt)
            raise
        if not ended:  # nothing was decided: the handler was not called (a stale delivery)
            ledger.run_ended(ident, "not-run", attempt=attempt)
        verdict = call.verdict
        if call.settled and verdict is not None:
            if verdict.dead_letter is not None:
                ledger.settled(ident, "dead-letter")
            elif verdict.outcome.kind is OutcomeKind.ACK:
                ledger.settled(ident, "ack")
            elif verdict.outcome.kind is OutcomeKind.DROP:
                ledger.settled(ident, "drop")


def ledger_middleware(ledger: Ledger, *, id_of: Callable[[Delivery], Id]) -> LedgerMiddleware:
    """A middleware that writes every handler run of the app (or broker, or subscriber) it is
    given to, with its outcome and settle, to ``ledger``.

    ``id_of`` names a delivery's message as its producer recorded it in
    :meth:`Ledger.published` (``lambda d: int(d.payload)`` for integers published with the
    default codec; a header's value for anything else). It sees the raw delivery, as the
    message is not decoded yet; an ``id_of`` that raises fails the subscription with a
    :class:`LedgerError` naming the delivery.
    """
    return LedgerMiddleware(ledger, id_of)
