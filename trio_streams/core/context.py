"""What a handler can know about the delivery it is handling, and what it can do from there."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .delivery import Delivery, producer_headers
from .errors import UnsupportedError
from .pipeline import SegmentClosed
from .positions import Position

if TYPE_CHECKING:
    from .app import State
    from .broker import Broker
    from .driver import Seeker
    from .pipeline import Pipeline
    from .subscription import SubscriptionRunner

__all__ = ["Context"]


class Context:
    """Per-delivery context; declare a parameter annotated ``Context`` to receive it.

    Built only for handlers that ask for it, so handlers that do not pay nothing.
    """

    __slots__ = ("_runner", "message")

    def __init__(self, runner: SubscriptionRunner, delivery: Delivery) -> None:
        self._runner = runner
        #: The delivery as it arrived: raw payload bytes, headers, position, attempt.
        self.message = delivery

    @property
    def headers(self) -> Mapping[str, str]:
        """The message's headers as its producer sent them: without the transport's own (the
        retry count and target a retry copy carries; ``ctx.attempt`` says how often it was
        tried), so a handler that forwards them (``ctx.publish(..., headers=ctx.headers)``)
        never makes the next stage take its message for a retry copy."""
        return producer_headers(self.message.headers)

    @property
    def position(self) -> Position | None:
        """Where this message is in its stream; seeking there delivers it again."""
        return self.message.position

    @property
    def timestamp_ms(self) -> int | None:
        """When the message was written (Unix epoch ms), where the transport records it."""
        return self.message.timestamp_ms

    @property
    def attempt(self) -> int:
        """How many times this message has been delivered, this time included (1 the first time)."""
        return self.message.attempt

    @property
    def stream(self) -> str:
        """The stream (key, list, channel) the message came from."""
        return self.message.stream

    @property
    def subscription(self) -> str:
        """The name of the subscription handling it."""
        return self._runner.label

    @property
    def state(self) -> State:
        """The app's shared state (``app.state``), set up by startup hooks."""
        return self._runner.app_state

    @property
    def logger(self) -> logging.Logger:
        """The subscription's logger (``trio_streams.subscription.<name>``)."""
        return self._runner.logger

    @property
    def broker(self) -> Broker:
        """The broker the subscription is mounted on."""
        return self._runner.broker

    @property
    def seeker(self) -> Seeker:
        """The seek handle of this subscription (stream files and in-process)."""
        seeker = self._runner.seeker
        if seeker is None:
            raise UnsupportedError(
                f"subscription {self._runner.label!r} reads a source that cannot seek"
            )
        return seeker

    @property
    def pipeline(self) -> Pipeline:
        """This delivery's segment of the pipeline window: commands sent with its
        acknowledgement if the outcome is ``ack``, discarded otherwise (``pipeline=True``).

        Raises :class:`~trio_streams.core.pipeline.SegmentClosed` once the delivery was settled: a
        command queued then would never be sent."""
        if self.message.ended:
            raise SegmentClosed(
                f"subscription {self._runner.label!r}: the delivery at {self.message.position!r} "
                "was already settled, so its segment takes no more commands"
            )
        pipeline = self._runner.pipeline_for(self.message)
        if pipeline is None:
            raise UnsupportedError(
                f"subscription {self._runner.label!r} has no pipeline window: mount it with "
                "pipeline=True on a transport that has one"
            )
        return pipeline

    async def publish(
        self,
        destination: str,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
        broker: Broker | None = None,
    ) -> Any:
        """Publish on this subscription's broker (or ``broker``); returns the receipt."""
        target = broker if broker is not None else self._runner.broker
        return await target.publish(destination, message, headers=headers)

    def __repr__(self) -> str:
        return f"<Context {self._runner.label!r} {self.message!r}>"
