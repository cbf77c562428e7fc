"""The wire form of request-reply, shared by the caller (:mod:`.requests`) and the handler
side (:mod:`._answers`): the headers a request and its reply carry, the :class:`Reply` a caller
gets, and the :class:`RemoteError` a handler's failure becomes.

A request is an ordinary message with two more headers: ``x-trio-streams-correlation-id`` (a
fresh id per request) and ``x-trio-streams-reply-to`` (the caller's reply address, whose form
is its transport's: a Pub/Sub channel for Redis and in-process brokers, a key of the same file
for stream files). A handler needs no change to answer one: what it returns is the reply.

A reply carries the request's correlation id. A failure's reply carries
``x-trio-streams-error`` too, and a JSON payload ``{"handler", "type", "message", "reason",
"attempts"}``: the handler's name, the exception's type name and its message — never a
traceback, which stays in the handler's log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, TypeVar, final

from .codec import DecodeError, decoder_for
from .errors import TrioStreamsError

__all__ = [
    "CORRELATION_HEADER",
    "ERROR_HEADER",
    "MESSAGE_LIMIT",
    "REPLY_TO_HEADER",
    "RemoteError",
    "Reply",
    "error_payload",
]

#: The id a request and its reply share.
CORRELATION_HEADER: Final = "x-trio-streams-correlation-id"
#: Where a request's reply goes (the caller's reply address, in its transport's form).
REPLY_TO_HEADER: Final = "x-trio-streams-reply-to"
#: Marks a reply that reports a failure instead of a value (its payload describes it).
ERROR_HEADER: Final = "x-trio-streams-error"

#: How much of an exception's message a failure's reply carries.
MESSAGE_LIMIT: Final = 1000

T = TypeVar("T")


@final
class RemoteError(TrioStreamsError):
    """The handler that took a request failed: it raised (``type`` is the exception's type
    name, ``message`` its message), or its message was dropped or dead-lettered without a
    value (``reason``: ``max-attempts``, ``undecodable``, ``by-key``, ``unencodable``,
    ``dropped``). ``attempts``: how many times the handler ran. No traceback crosses the wire:
    it is in the handler's log."""

    def __init__(
        self,
        destination: str,
        *,
        handler: str,
        type: str,
        message: str,
        reason: str,
        attempts: int,
    ) -> None:
        self.destination = destination
        self.handler = handler
        self.type = type
        self.message = message
        self.reason = reason
        self.attempts = attempts
        what = f"{type}: {message}" if message else type
        super().__init__(
            f"the request to {destination} failed in handler {handler} ({what}; "
            f"{reason} after {attempts} attempt(s))"
        )

    @classmethod
    def from_reply(cls, destination: str, payload: bytes) -> RemoteError:
        """The error a failure's reply describes; a payload this version cannot read is
        reported as such, not raised as a decoding error."""
        try:
            fields = json.loads(payload)
            return cls(
                destination,
                handler=str(fields["handler"]),
                type=str(fields["type"]),
                message=str(fields.get("message", "")),
                reason=str(fields.get("reason", "")),
                attempts=int(fields.get("attempts", 0)),
            )
        except (ValueError, KeyError, TypeError):
            return cls(
                destination,
                handler="?",
                type="UnreadableError",
                message=repr(payload[:200]),
                reason="unreadable",
                attempts=0,
            )


def error_payload(
    handler: str, error: BaseException | None, *, reason: str, attempts: int
) -> bytes:
    """The payload of a failure's reply (see the module docstring)."""
    if error is None:
        kind, message = "Dropped", "the message was dropped without a value"
    else:
        kind, message = type(error).__name__, str(error)[:MESSAGE_LIMIT]
    fields = {
        "handler": handler,
        "type": kind,
        "message": message,
        "reason": reason,
        "attempts": attempts,
    }
    return json.dumps(fields).encode("utf-8")


@final
class Reply:
    """A request's answer: the handler's return value, encoded as a handler's publishers
    encode it. Decode it as a handler's argument is decoded: ``reply.decode(T)``, or read it
    as ``reply.json()``, ``reply.text()`` or ``reply.payload``."""

    __slots__ = ("correlation_id", "headers", "payload")

    def __init__(self, payload: bytes, headers: Mapping[str, str], correlation_id: str) -> None:
        self.payload = payload
        self.headers = headers
        self.correlation_id = correlation_id

    def decode(self, annotation: type[T] | Any) -> T:
        """The payload decoded to ``annotation`` (any type a handler's message can have);
        raises :class:`~trio_streams.core.codec.DecodeError` naming what did not fit."""
        value: T = decoder_for(annotation)(self.payload)
        return value

    def json(self) -> Any:
        """The payload parsed as JSON (what a handler's plain value is encoded as); raises
        :class:`~trio_streams.core.codec.DecodeError`, as :meth:`decode` does, if it is not
        JSON (a handler that returned a ``str`` or ``bytes`` replies with them as they are)."""
        try:
            return json.loads(self.payload)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise DecodeError(f"the reply is not JSON: {exc}") from None

    def text(self) -> str:
        return self.payload.decode("utf-8")

    def __repr__(self) -> str:
        return f"<Reply {self.correlation_id} {self.payload[:60]!r}>"
