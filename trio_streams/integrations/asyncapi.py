"""An app's AsyncAPI 3.0 document: its servers, channels, operations and message schemas.

:func:`asyncapi_document` reads what an app declares, without running it:

- **servers** — one per broker, keyed by its name (two brokers of one name: ``redis``,
  ``redis_2``), as the broker describes itself (``Broker.description()``, see
  :mod:`trio_streams.core.description`): a Redis broker's URL (host, port, ``redis``/``rediss``,
  and its cluster or sentinel topology; a password in the URL is never written), a stream
  file's path (protocol ``file``), the in-process broker (protocol ``in-process``);
- **channels** — one per stream, list or Pub/Sub channel a subscription reads or a publisher
  writes, on the server of the broker that reads or writes it (a handler reading one broker and
  publishing through another has its publisher's channel on the other), with the binding its
  source (``Source.description()``) or broker says it is read or written with — Redis:
  ``xreadgroup`` with the group and consumer, ``xread``, ``blmove``/``blpop``,
  ``subscribe``/``psubscribe``/``ssubscribe``; ``xadd``, ``rpush``/``lpush``,
  ``publish``/``spublish``: the shape FastStream's documents use, so AsyncAPI tools show both
  alike;
  A subscription's ``dead_letter=`` destination is a channel of its own on the subscription's
  broker, written as the transport writes it (``xadd`` on streams; on lists and Pub/Sub the
  source's ``dead_letter_kind``). Retry copies go back to the stream, list or channel they came
  from, so they have no channel of their own;
- **operations** — ``receive`` for each subscription (its handler's name and docstring),
  ``send`` for each publisher (what the handlers it decorates return, whichever broker they
  read), and ``send`` of each subscription's dead letters;
- **request-reply** — a subscription whose handler returns a value (its return annotation is
  not ``None``, ``NoReturn`` or an ``Outcome``; not a batch handler, whose replies are
  ``null``) answers the requests it takes (``broker.request``), so its ``receive`` has a
  ``reply``: its ``address`` is where the request says
  (``$message.header#/x-trio-streams-reply-to``), its ``channel`` the server's channel of
  replies (``<server>.replies``, whose ``address`` is null: each caller has its own, known
  only at run time), its ``messages`` the handler's value (``<Type>.reply``: the return
  annotation's schema, ``null`` admitted where it admits ``None`` or an outcome, which
  reply ``null``) and the failure's reply (``trio-streams.error.reply``: the
  ``x-trio-streams-error`` header and the JSON the caller's ``RemoteError`` is read from).
  Its request message (``<Type>.request``) has the subscribed payload and lists the two
  request headers, optional (a message without them is not a request: it is handled alike,
  and answers nobody). Each of these messages has a ``correlationId``
  (``$message.header#/x-trio-streams-correlation-id``);
- **messages** — their payload schemas from the annotations: dataclasses, ``msgspec.Struct``,
  enums and plain types through msgspec's JSON Schema, pydantic models through
  their own ``model_json_schema``, ``bytes`` as a binary string; shared definitions go to
  ``components/schemas``. Each says the content type the codec writes for it:
  ``text/plain; charset=utf-8`` for ``str`` (written as its UTF-8 text, not as a JSON string),
  ``application/octet-stream`` for ``bytes``, ``application/json`` for everything else. A dead
  letter's message has the subscribed payload (the payload as it arrived) and the
  ``x-dead-letter-*`` headers saying why.

``trio-streams asyncapi MODULE:ATTRIBUTE`` writes it as JSON.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import msgspec

from ..core.app import App
from ..core.broker import Broker
from ..core.description import Binding
from ..core.destinations import DestinationKind
from ..core.errors import TrioStreamsError
from ..core.outcome import Outcome
from ..core.replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER
from ..core.routing import Publisher, Subscription
from ..core.transport import DEAD_LETTER_HEADERS

__all__ = ["ASYNCAPI_VERSION", "asyncapi_document"]

ASYNCAPI_VERSION = "3.0.0"

_REF = "#/components/schemas/{name}"
_BINARY: dict[str, Any] = {"type": "string", "format": "binary"}
_TEXT = "text/plain; charset=utf-8"
_OCTETS = "application/octet-stream"
_JSON = "application/json"

#: What each ``x-dead-letter-*`` header holds (the headers of ``DeadLetter.headers_for``).
_DEAD_LETTER_HEADER_SCHEMAS: Mapping[str, dict[str, Any]] = {
    "x-dead-letter-reason": {
        "type": "string",
        "enum": ["max-attempts", "undecodable", "by-key", "unencodable"],
        "description": "why it was dead-lettered",
    },
    "x-dead-letter-error": {
        "type": "string",
        "description": "the type and message of the last failure, on one line ('' if none)",
    },
    "x-dead-letter-attempts": {
        "type": "string",
        "pattern": "^[0-9]+$",
        "description": "how many times its handler ran",
    },
    "x-dead-letter-stream": {
        "type": "string",
        "description": "the stream, list or channel it was read from",
    },
    "x-dead-letter-position": {
        "type": "string",
        "description": "where it was read there ('' where the transport has no position)",
    },
    "x-dead-letter-subscription": {
        "type": "string",
        "description": "the subscription that dead-lettered it",
    },
    "x-dead-letter-at-ms": {
        "type": "string",
        "pattern": "^[0-9]+$",
        "description": "when it was dead-lettered, in milliseconds since the Unix epoch",
    },
}


#: The reasons a failure's reply gives (``x-trio-streams-error``, and ``reason`` in its payload).
_FAILURE_REASONS = ["max-attempts", "undecodable", "by-key", "unencodable", "dropped"]

_CORRELATION_ID: Mapping[str, str] = {
    "description": "the id a request and its reply share",
    "location": f"$message.header#/{CORRELATION_HEADER}",
}

_REPLY_ADDRESS: Mapping[str, str] = {
    "description": (
        "the caller's reply address, which the request names, in its transport's form: a "
        "Pub/Sub channel (Redis), an in-process channel, a key of the same stream file"
    ),
    "location": f"$message.header#/{REPLY_TO_HEADER}",
}

_CORRELATION_SCHEMA: Mapping[str, str] = {
    "type": "string",
    "description": "the id a request and its reply share (a fresh one per request)",
}

#: The headers a request carries besides its own (``Broker.request``).
_REQUEST_HEADERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        CORRELATION_HEADER: _CORRELATION_SCHEMA,
        REPLY_TO_HEADER: {
            "type": "string",
            "description": "where the handler's reply goes: the caller's reply address",
        },
    },
}

#: The payload of a failure's reply (``core.replies.error_payload``).
_FAILURE_PAYLOAD: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "handler": {"type": "string", "description": "the handler that failed"},
        "type": {
            "type": "string",
            "description": "its exception's type name ('Dropped': it returned drop())",
        },
        "message": {"type": "string", "description": "its exception's message, cut at 1000"},
        "reason": {
            "type": "string",
            "enum": _FAILURE_REASONS,
            "description": "why its message was given up",
        },
        "attempts": {"type": "integer", "minimum": 0, "description": "how many times it ran"},
    },
    "required": ["handler", "type", "message", "reason", "attempts"],
}

#: The key (and name) of the failure's reply in ``components/messages``: a name no Python
#: type has.
_FAILURE_REPLY = "trio-streams.error.reply"


def asyncapi_document(
    app: App, *, version: str = "0.1.0", description: str | None = None
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``app`` (a JSON-ready dict); see the module docstring."""
    builder = _Builder()
    for broker in app.brokers:
        builder.server(broker)
    for broker in app.brokers:
        builder.add_subscriptions(broker)
    for broker in app.brokers:
        builder.add_lone_publishers(broker)
    builder.add_reply_channels()
    info: dict[str, Any] = {"title": app.name, "version": version}
    if description:
        info["description"] = description
    document: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": info,
        "defaultContentType": "application/json",
        "servers": builder.servers,
        "channels": builder.channels,
        "operations": builder.operations,
    }
    components: dict[str, Any] = {}
    if builder.messages:
        components["messages"] = builder.messages
    if builder.schemas:
        components["schemas"] = builder.schemas
    if components:
        document["components"] = components
    return document


def _key(text: str) -> str:
    """A component key AsyncAPI accepts (``^[a-zA-Z0-9.\\-_]+$``)."""
    return re.sub(r"[^A-Za-z0-9.\-_]+", "_", text) or "_"


class _Builder:
    def __init__(self) -> None:
        self.servers: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.operations: dict[str, Any] = {}
        self.messages: dict[str, Any] = {}
        self.schemas: dict[str, Any] = {}
        #: The server key of each broker (by identity: two brokers may share a name).
        self._server_keys: dict[int, str] = {}
        #: The publishers that decorate a handler of the app (by identity).
        self._decorating: set[int] = set()
        #: The reply object of each request-reply operation, by server (the server's broker,
        #: and the reply messages each names), completed once every other channel is known.
        self._replies: dict[str, tuple[Broker, list[tuple[dict[str, Any], list[str]]]]] = {}

    # ---- servers -----------------------------------------------------------------------------

    def server(self, broker: Broker) -> str:
        """The key of ``broker``'s server, added on first use: one per broker, even for two
        brokers of one name (``redis``, ``redis_2``)."""
        key = self._server_keys.get(id(broker))
        if key is None:
            key = self._server_keys[id(broker)] = self._unique(self.servers, _key(broker.name))
            self.servers[key] = dict(broker.description().server)
        return key

    def add_subscriptions(self, broker: Broker) -> None:
        """A receive per subscription of ``broker``, and a send per publisher decorating its
        handler, each on the publisher's own broker, carrying what the handler returns."""
        server = self.server(broker)
        for subscription in broker.subscriptions:
            self._receive(server, subscription, broker)
            self._send_dead_letters(server, subscription)
            returns = _return_type(subscription.handler.fn)
            for publisher in subscription.publishers:
                self._decorating.add(id(publisher))
                self._send(publisher, returns, subscription)

    def add_lone_publishers(self, broker: Broker) -> None:
        """A send per publisher of ``broker`` that decorates no handler of the app (its payload
        is unknown); after :meth:`add_subscriptions` of every broker."""
        for publisher in broker.all_publishers():
            if id(publisher) not in self._decorating:
                self._send(publisher, None, None)

    # ---- operations --------------------------------------------------------------------------

    def _receive(self, server: str, subscription: Subscription, broker: Broker) -> None:
        source = subscription.source
        handler = subscription.handler
        silent = handler.is_batch or subscription.options.no_reply
        replies = None if silent else _reply_type(handler.fn)
        payload = _subscribed_payload(subscription)
        message = self._message(payload, variant="request" if replies else None)
        binding = source.description().reads
        channels = []
        for stream in source.streams:
            channel = self._channel(server, stream, message, binding)
            channels.append(channel)
        operation: dict[str, Any] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channels[0]}"},
            "summary": f"{subscription.name}: {source!r}",
            "messages": [{"$ref": f"#/channels/{channels[0]}/messages/{message}"}],
        }
        doc = inspect.getdoc(handler.fn)
        if doc:
            operation["description"] = doc
        if replies is not None:
            operation["reply"] = self._reply(server, broker, *replies)
        self.operations[self._unique(self.operations, _key(f"{server}.{subscription.name}"))] = (
            operation
        )
        # A source of several streams: one operation per further channel, the same handler.
        for channel in channels[1:]:
            self.operations[self._unique(self.operations, _key(f"{server}.{channel}.receive"))] = {
                **operation,
                "channel": {"$ref": f"#/channels/{channel}"},
                "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
            }

    def _send(self, publisher: Publisher, returns: Any, subscription: Subscription | None) -> None:
        """A send on the publisher's own broker (whichever broker the handler reads)."""
        broker = publisher.broker
        server = self.server(broker)
        target = publisher.target
        message = self._message(returns)
        binding = broker.description().writes.get(target.kind)
        channel = self._channel(server, target.name, message, binding)
        operation: dict[str, Any] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{channel}"},
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
        }
        if subscription is not None:
            operation["summary"] = f"what {subscription.name} returns"
        name = _key(f"{server}.{target.name}.send")
        self.operations[self._unique(self.operations, name)] = operation

    def _send_dead_letters(self, server: str, subscription: Subscription) -> None:
        """A send of the subscription's dead letters, if it has a ``dead_letter=``: on its own
        broker, with the payload as it arrived and the headers saying why."""
        destination = subscription.options.policy.dead_letter
        if destination is None:
            return
        message = self._message(_subscribed_payload(subscription), dead_letter=True)
        binding = subscription.source.description().dead_letters
        channel = self._channel(server, destination, message, binding)
        self.operations[
            self._unique(self.operations, _key(f"{server}.{subscription.name}.dead_letter"))
        ] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{channel}"},
            "summary": f"the dead letters of {subscription.name}",
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
        }

    # ---- request-reply -----------------------------------------------------------------------

    def _reply(self, server: str, broker: Broker, returns: Any, nullable: bool) -> dict[str, Any]:
        """The reply object of a request-reply operation on ``server``: its channel and
        messages are filled in by :meth:`add_reply_channels`."""
        value = self._message(returns, variant="reply", nullable=nullable)
        failure = self._failure_reply()
        reply: dict[str, Any] = {"address": dict(_REPLY_ADDRESS)}
        _, pending = self._replies.setdefault(server, (broker, []))
        pending.append((reply, [value, failure]))
        return reply

    def add_reply_channels(self) -> None:
        """The channel of replies of each server that has a request-reply operation
        (``<server>.replies``, its address null: each caller has its own), with the messages
        its replies carry; after every other channel, so none of them takes its key."""
        for server, (broker, pending) in self._replies.items():
            key = self._unique(self.channels, _key(f"{server}.replies"))
            channel: dict[str, Any] = {
                "address": None,
                "title": "replies",
                "description": (
                    "The replies of this server's request-reply operations: each goes to the "
                    f"address its request names ({REPLY_TO_HEADER}), known only at run time."
                ),
                "servers": [{"$ref": f"#/servers/{server}"}],
                "messages": {},
            }
            binding = broker.description().writes.get(_reply_kind(broker))
            if binding is not None:
                channel["bindings"] = binding.asyncapi()
            self.channels[key] = channel
            for reply, messages in pending:
                reply["channel"] = {"$ref": f"#/channels/{key}"}
                reply["messages"] = [
                    {"$ref": f"#/channels/{key}/messages/{message}"} for message in messages
                ]
                for message in messages:
                    channel["messages"][message] = {"$ref": f"#/components/messages/{message}"}

    def _failure_reply(self) -> str:
        """The key of the message a handler's failure replies with."""
        if _FAILURE_REPLY not in self.messages:
            self.messages[_FAILURE_REPLY] = {
                "name": _FAILURE_REPLY,
                "title": "A failure's reply",
                "summary": (
                    "the handler failed: its message was given up (it raised until its attempts "
                    "were spent, or could not be decoded); the caller raises RemoteError"
                ),
                "contentType": _JSON,
                "headers": {
                    "type": "object",
                    "properties": {
                        CORRELATION_HEADER: dict(_CORRELATION_SCHEMA),
                        ERROR_HEADER: {
                            "type": "string",
                            "enum": list(_FAILURE_REASONS),
                            "description": "marks a failure's reply: why the message was given up",
                        },
                    },
                    "required": [CORRELATION_HEADER, ERROR_HEADER],
                },
                "payload": _copy(_FAILURE_PAYLOAD),
                "correlationId": dict(_CORRELATION_ID),
            }
        return _FAILURE_REPLY

    # ---- channels and messages ---------------------------------------------------------------

    def _channel(self, server: str, address: str, message: str, binding: Binding | None) -> str:
        key = _key(f"{server}.{address}")
        channel = self.channels.get(key)
        if channel is None:
            channel = self.channels[key] = {
                "address": address,
                "servers": [{"$ref": f"#/servers/{server}"}],
                "messages": {},
            }
            if binding is not None:
                channel["bindings"] = binding.asyncapi()
        channel["messages"][message] = {"$ref": f"#/components/messages/{message}"}
        return key

    def _message(
        self,
        payload: Any,
        *,
        dead_letter: bool = False,
        variant: str | None = None,
        nullable: bool = False,
    ) -> str:
        """The key of the message whose payload is ``payload`` (a type; None: unknown), of the
        dead letter carrying it, or of its ``variant``: ``request`` (a subscribed message that
        may be a request) or ``reply`` (a handler's value replied; ``nullable``: or ``null``)."""
        name, schema = self._payload_schema(payload)
        if dead_letter:
            name = f"{name}.dead_letter"
        elif variant == "reply" and nullable and schema and _content_type(payload) == _JSON:
            name, schema = f"{name}.nullable", {"anyOf": [schema, {"type": "null"}]}
        if variant is not None:
            name = f"{name}.{variant}"
        key = _key(name)
        if key not in self.messages:
            message: dict[str, Any] = {
                "name": name,
                "contentType": _content_type(payload),
                "payload": schema,
            }
            if dead_letter:
                message["summary"] = "a delivery its subscription gave up on, as it arrived"
                message["headers"] = {
                    "type": "object",
                    "properties": {k: dict(v) for k, v in _DEAD_LETTER_HEADER_SCHEMAS.items()},
                    "required": list(DEAD_LETTER_HEADERS),
                }
            elif variant == "request":
                message["summary"] = (
                    "a message its handler answers when it is a request: when it carries "
                    f"{REPLY_TO_HEADER} and {CORRELATION_HEADER}"
                )
                message["headers"] = _copy(_REQUEST_HEADERS)
                message["correlationId"] = dict(_CORRELATION_ID)
            elif variant == "reply":
                message["summary"] = "what the handler returned, replied to the request's caller"
                message["headers"] = {
                    "type": "object",
                    "properties": {CORRELATION_HEADER: dict(_CORRELATION_SCHEMA)},
                    "required": [CORRELATION_HEADER],
                    "not": {"required": [ERROR_HEADER]},  # that is a failure's reply
                }
                message["correlationId"] = dict(_CORRELATION_ID)
            self.messages[key] = message
        return key

    def _payload_schema(self, payload: Any) -> tuple[str, dict[str, Any]]:
        if payload is None or payload is Any or payload is inspect.Parameter.empty:
            return "Message", {}
        if payload in (bytes, bytearray, memoryview):
            return "Bytes", dict(_BINARY)
        name = getattr(payload, "__name__", None) or _key(repr(payload))
        model_schema = getattr(payload, "model_json_schema", None)
        if callable(model_schema):  # a pydantic model
            schema = model_schema(ref_template="#/components/schemas/{model}")
            for def_name, definition in schema.pop("$defs", {}).items():
                self.schemas.setdefault(def_name, definition)
            return name, schema
        try:
            (schema,), components = msgspec.json.schema_components((payload,), ref_template=_REF)
        except TypeError:
            return name, {}
        self.schemas.update(components)
        return name, schema

    @staticmethod
    def _unique(existing: Mapping[str, Any], key: str) -> str:
        if key not in existing:
            return key
        n = 2
        while f"{key}_{n}" in existing:
            n += 1
        return f"{key}_{n}"


def _content_type(payload: Any) -> str:
    """What the codec writes for ``payload`` (``codec.encode``; ``codec.decoder_for`` reads
    it alike): a ``str`` as its UTF-8 text, bytes as they are, everything else as JSON."""
    if payload is str:
        return _TEXT
    if payload in (bytes, bytearray, memoryview):
        return _OCTETS
    return _JSON


def _subscribed_payload(subscription: Subscription) -> Any:
    """The type of one message the subscription reads (a batch handler's element type)."""
    handler = subscription.handler
    payload = handler.payload_type
    if handler.is_batch:
        (payload,) = typing.get_args(payload) or (bytes,)
    return payload


def _reply_type(fn: Any) -> tuple[Any, bool] | None:
    """What a handler replies to a request, if it returns a value: the type its publishers
    publish (:func:`_return_type`) and whether it may reply ``null`` instead (its annotation
    admits ``None``, or an outcome: ``ack()`` replies ``null``); None when it returns nothing
    (``None``, ``NoReturn``, an outcome) or is not annotated."""
    returns = _return_type(fn)
    if returns is None:
        return None
    try:
        annotation = typing.get_type_hints(fn, include_extras=False).get("return")
    except (NameError, TypeError):
        return None
    members = typing.get_args(annotation)
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        members = ()
    nullable = any(_publishes_nothing(member) for member in members)
    return returns, nullable


def _reply_kind(broker: Broker) -> DestinationKind:
    """The kind of destination ``broker`` publishes its replies to (a channel, or a key of the
    file), for the binding of its channel of replies."""
    try:
        return broker.reply_destination(broker.reply_address()).kind
    except TrioStreamsError:  # a transport that cannot say: a channel, as by default
        return DestinationKind.CHANNEL


def _copy(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a constant schema, so a document's parts never share (and a caller
    changing one never changes the next document)."""
    copied: dict[str, Any] = json.loads(json.dumps(schema))
    return copied


def _return_type(fn: Any) -> Any:
    """What a handler's publishers publish: its return annotation less ``None`` and
    ``Outcome``, which settle the delivery and publish nothing (``-> str | None`` publishes a
    ``str``); None if that leaves nothing, or the annotation does not resolve."""
    try:
        hints = typing.get_type_hints(fn, include_extras=False)
    except (NameError, TypeError):  # an annotation that does not resolve: document it untyped
        return None
    returns = hints.get("return")
    if typing.get_origin(returns) in (typing.Union, types.UnionType):
        published = [a for a in typing.get_args(returns) if not _publishes_nothing(a)]
        if not published:
            return None
        return published[0] if len(published) == 1 else typing.Union[tuple(published)]  # noqa: UP007
    return None if _publishes_nothing(returns) else returns


def _publishes_nothing(annotation: Any) -> bool:
    return (
        annotation is type(None)
        or annotation is None
        or annotation is typing.NoReturn
        or annotation is typing.Never
        or (isinstance(annotation, type) and issubclass(annotation, Outcome))
    )
