"""The handler's side of request-reply: answering a request delivery (see :mod:`.replies`).

A delivery is a request when it carries ``x-trio-streams-reply-to`` and
``x-trio-streams-correlation-id``. It is answered at its message's **final** outcome, so the
caller hears what became of the message, not of one attempt:

- the handler returned (a value, ``None`` or ``ack()``): the value, encoded as its publishers
  encode it (``None`` as JSON ``null``), goes to the reply address — as well as to the handler's
  ``@publisher`` destinations — before the delivery is settled; a reply that cannot be sent runs
  the failure policy, as a publisher's failing publish does;
- the message is given up (dropped or dead-lettered: attempts spent, undecodable, a handler that
  returned ``drop()``): a failure's reply (:class:`~.replies.RemoteError` at the caller), sent
  after the verdict is decided; if it cannot be sent, that is logged and the verdict goes on;
- a retry answers nothing: the retried copy carries the same headers, and its run answers.

A subscription mounted with ``no_reply=True`` answers no request at all: an observer of the
messages it reads (an audit beside the service that answers them), whose own ``null`` would
race that service's value. Every other subscription of a stream answers what it reads.

Every run that reaches a final outcome answers, so a message handled twice (redelivered after a
crash) answers twice; the caller takes the first reply and counts the other late.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .delivery import Delivery
from .errors import ConfigurationError
from .middleware import publish_hooks
from .replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER, error_payload
from .reporting import describe

if TYPE_CHECKING:
    from .subscription import SubscriptionRunner

__all__ = ["Answers", "is_request"]

#: The payload of a reply to a handler that returned nothing.
NULL = b"null"


def is_request(delivery: Delivery) -> bool:
    headers = delivery.headers
    return bool(headers) and REPLY_TO_HEADER in headers and CORRELATION_HEADER in headers


class Answers:
    """Sends the replies of one subscription's request deliveries through its broker."""

    def __init__(self, runner: SubscriptionRunner, logger: logging.Logger) -> None:
        self._runner = runner
        self._broker = runner.subscription.broker
        self._handler = runner.subscription.handler.name
        self._label = runner.label
        self._log = logger
        #: Mounted with ``no_reply=True``: it answers no request.
        self.silent = runner.subscription.options.no_reply
        #: A pipeline window, and no publish middleware to see each reply: a value's reply
        #: may ride in the window with the read's acknowledgement (:meth:`value`).
        self._windowed: bool | None = None

    async def value(self, delivery: Delivery, payload: bytes) -> None:
        """Answer ``delivery`` with ``payload``; raises what the send raised.

        On a subscription with a pipeline window whose transport can queue the reply there
        (Redis: its ``PUBLISH``), the reply is queued in the delivery's segment instead, and
        leaves with the read's acknowledgement in one round trip, once every delivery of the
        read is settled, as the segment's other commands do."""
        if self.silent:
            return
        headers = delivery.headers
        address = headers[REPLY_TO_HEADER]
        reply_headers = {CORRELATION_HEADER: headers[CORRELATION_HEADER]}
        if self._windowed is None:
            self._windowed = bool(
                self._runner.subscription.transport_options.get("pipeline")
            ) and not publish_hooks(self._broker.app_middlewares + self._broker.middlewares)
        if self._windowed:
            command = self._broker.reply_command(address, payload, reply_headers)
            segment = None if command is None else self._runner.source.pipeline(delivery)
            if command is not None and segment is not None:
                name, arguments = command
                segment.command(name, *arguments)
                return
        try:
            await self._broker.send_reply(address, payload, reply_headers)
        except ConfigurationError as exc:
            # An address this broker can never reach (a recording replayed into a stream
            # file holds the Redis channels its requests named): the handler ran, and running
            # it again would only repeat it. Said, and the outcome goes on.
            self._log.warning(
                "%s: request %s is not answered: its reply-to %r cannot be reached from %s (%s)",
                self._label,
                reply_headers[CORRELATION_HEADER],
                address,
                self._broker.name,
                exc,
            )

    async def failure(
        self, delivery: Delivery, error: BaseException | None, *, reason: str, attempts: int
    ) -> None:
        """Answer ``delivery`` with a failure; a send that fails is logged, not raised."""
        if self.silent:
            return
        headers = delivery.headers
        payload = error_payload(self._handler, error, reason=reason, attempts=attempts)
        try:
            await self._broker.send_reply(
                headers[REPLY_TO_HEADER],
                payload,
                {CORRELATION_HEADER: headers[CORRELATION_HEADER], ERROR_HEADER: reason},
            )
        except Exception as exc:  # noqa: BLE001 - the verdict goes on; the caller times out
            self._log.warning(
                "%s: the failure of request %s could not be answered: %s",
                self._label,
                headers[CORRELATION_HEADER],
                describe(exc),
            )
