"""OpenTelemetry traces of an app: a consumer span per delivery, a producer span per publish.

``App("billing", middlewares=[TracingMiddleware()])`` uses ``opentelemetry-api`` (the ``otel``
extra; configure an SDK and an exporter as for any OpenTelemetry program). Spans follow the
messaging semantic conventions:

- **process** — one ``CONSUMER`` span per delivery, named ``process <stream>``, from before
  decoding to after the settle, with ``messaging.system`` (``redis``, ``trio_streams.file``,
  ``trio_streams.memory``: what the source and its broker say of themselves, see
  :mod:`trio_streams.core.description`), ``messaging.operation.type`` ``process``,
  ``messaging.destination.name``, ``messaging.message.id`` (its position), the consumer group
  where there is one, the attempt (``messaging.message.delivery_count``), and the outcome
  (``trio_streams.outcome``); a handler's exception is recorded on it and sets its status to
  error.
- **send** — one ``PRODUCER`` span per publish, named ``send <destination>``, a child of the
  delivery being handled when a handler publishes.
- **request** — one ``CLIENT`` span per ``broker.request``, named ``request <destination>``,
  around the whole request: its ``send`` span is its child, and it ends with the reply (or the
  timeout, the failure). It says the outcome (``trio_streams.request.outcome``: ``ok``,
  ``remote_error``, ``timeout``, ``no_responders``, ``lost``, ``error``, ``cancelled``); an
  outcome other than ``ok`` or ``cancelled`` records the error and sets its status to error.
- **a reply** — the handler side's ``send`` of a reply is a child of the handler's process
  span, named ``send`` alone (its destination is the caller's reply address, made per caller:
  ``messaging.destination.temporary`` and ``messaging.destination.anonymous`` say so, and a
  span name keeps to what is shared), with ``trio_streams.reply`` ``value`` or ``error``; it
  is **linked** to the request's creation context (the context the request's headers carried:
  its ``send`` span, inside the caller's ``request`` span).

Each span of a request-reply exchange (the request, its send, its process, the reply's send)
carries the correlation id as ``messaging.message.conversation_id``.

The trace context travels in the message headers (``traceparent``, ``tracestate``: the W3C
format, through the globally configured propagator), so a trace crosses stream files, Redis
and processes: the process span of a delivery is a child of the send span that published it.

Cost: a subscription's span name and the attributes its deliveries share are built once, at
its first delivery; a delivery's span starts with them (a copy only for a later attempt or a
request), and gets its id (``messaging.message.id``) just after it starts, when it records. A
span that does not record (no SDK configured, or a sampler that left it out) gets none of a
delivery's own attributes, no outcome, no status: what is left is the context, extracted from
the headers (none from a delivery without headers) and made current, so the trace still passes
on. A handler that takes the payload alone stays on the in-line path inside the span.
``benchmarks/observability_cost.py`` measures it against no middleware, with the SDK, sampled,
and with no SDK, and splits the cost between the OpenTelemetry library and the framework.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import MappingProxyType, TracebackType
from typing import Any

import trio

from ..core.extras import importing
from ..core.middleware import HandlerCall, Middleware, PublishCall, RequestCall
from ..core.replies import CORRELATION_HEADER, REPLY_TO_HEADER
from ..core.transport import Source

with importing("otel", "trio_streams.otel"):
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

__all__ = ["TracingMiddleware"]

_SCOPE = "trio_streams"
#: Subscriptions (and streams of one) whose attributes are kept; past it, the cache starts over.
_KEPT_SOURCES = 1024
#: The context a delivery without headers is processed in: a root, nothing extracted.
_ROOT = otel_context.Context()


class TracingMiddleware(Middleware):
    """Spans per delivery and per publish, with the trace context in the headers (see the
    module). ``tracer_provider`` defaults to the global one."""

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        #: What each subscription traced says of itself, by its name (see :class:`_Traced`):
        #: built at its first delivery, not per delivery.
        self._traced: dict[str, _Traced] = {}
        #: The creation context of each request being handled (from its headers), by its
        #: correlation id, while its handling lasts: the reply's span links to it.
        self._answering: dict[str, SpanContext] = {}

    def _traced_of(self, call: HandlerCall) -> _Traced:
        """``call``'s subscription as traced: described once, then looked up by its name
        (and the identity of its source, which a subscription of that name in another app
        does not share)."""
        traced = self._traced.get(call.subscription)
        if traced is None or traced.source is not call.source:
            if len(self._traced) >= _KEPT_SOURCES:
                self._traced.clear()
            traced = self._traced[call.subscription] = _Traced(call)
        return traced

    def handle(self, call: HandlerCall) -> AbstractAsyncContextManager[None]:
        return _Processing(self, call)

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        name = call.destination.name
        attributes: dict[str, Any] = {
            "messaging.system": call.system,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": name,
        }
        span_name = f"send {name}"
        links: list[Link] = []
        correlation_id = call.headers.get(CORRELATION_HEADER)
        if correlation_id is not None:
            attributes["messaging.message.conversation_id"] = correlation_id
            if call.is_reply:  # to a reply address made per caller: not in the span's name
                span_name = "send"
                attributes["messaging.destination.temporary"] = True
                attributes["messaging.destination.anonymous"] = True
                attributes["trio_streams.reply"] = "error" if call.is_error_reply else "value"
                request = self._answering.get(correlation_id)
                if request is not None:
                    links.append(Link(request))
        with self._tracer.start_as_current_span(
            span_name, kind=SpanKind.PRODUCER, attributes=attributes, links=links
        ):
            propagate.inject(call.headers)
            yield

    @asynccontextmanager
    async def request(self, call: RequestCall) -> AsyncIterator[None]:
        name = call.destination.name
        with self._tracer.start_as_current_span(
            f"request {name}",
            kind=SpanKind.CLIENT,
            attributes={
                "messaging.system": call.system,
                "messaging.operation.name": "request",
                "messaging.destination.name": name,
                "messaging.message.conversation_id": call.correlation_id,
            },
            record_exception=False,  # the outcome says what happened, below
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            finally:
                outcome = call.outcome or "error"  # None: a middleware inside it raised
                span.set_attribute("trio_streams.request.outcome", outcome)
                if outcome == "cancelled":
                    span.set_attribute("trio_streams.cancelled", True)  # not a failure
                elif call.error is not None:
                    span.record_exception(call.error)
                    span.set_status(Status(StatusCode.ERROR, type(call.error).__name__))


class _Traced:
    """One subscription as its process spans say it, built once: its source (by identity),
    and per stream it reads the span's name and the attributes every delivery of it shares
    (``messaging.system``, the operation, the destination, the subscription, the consumer
    group, a first attempt's delivery count). A delivery adds only what is its own: its id
    (its position), and, on a later attempt or for a request, a copy with its delivery count
    or its conversation id."""

    __slots__ = ("_group", "_subscription", "_system", "source", "streams")

    def __init__(self, call: HandlerCall) -> None:
        self.source: Source = call.source
        described = call.source.description()
        self._system = described.system or f"trio_streams.{call.kind}"
        self._group = described.group
        self._subscription = call.subscription
        #: Per stream: the span's name and the attributes shared by its first attempts.
        self.streams: dict[str, tuple[str, Mapping[str, Any]]] = {}

    def stream(self, stream: str) -> tuple[str, Mapping[str, Any]]:
        """The span name and shared attributes of a delivery from ``stream``."""
        known = self.streams.get(stream)
        if known is None:
            attributes: dict[str, Any] = {
                "messaging.system": self._system,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": stream,
                "messaging.message.delivery_count": 1,
                "trio_streams.subscription": self._subscription,
            }
            if self._group is not None:
                attributes["messaging.consumer.group.name"] = self._group
            if len(self.streams) >= _KEPT_SOURCES:
                self.streams.clear()
            known = self.streams[stream] = (f"process {stream}", MappingProxyType(attributes))
        return known


class _Processing(AbstractAsyncContextManager[None]):
    """The ``CONSUMER`` span of one delivery, from before its decoding to after its settle
    (``TracingMiddleware.handle``): a class rather than a generator, so entering and leaving
    it costs two calls. When the span does not record (no SDK configured, or not sampled),
    the attributes that are the delivery's own are not built at all.

    Cancelled (a stop), the span says so (``trio_streams.cancelled``) and is not an error; an
    exception raised through it is recorded and marks it an error; either is raised on."""

    __slots__ = ("_answering", "_call", "_middleware", "_span", "_token")

    def __init__(self, middleware: TracingMiddleware, call: HandlerCall) -> None:
        self._middleware = middleware
        self._call = call
        self._answering: tuple[str, SpanContext] | None = None

    async def __aenter__(self) -> None:
        middleware = self._middleware
        delivery = self._call.delivery
        headers = delivery.headers
        # Nothing to extract from no headers: a propagator leaves the context as it is.
        parent = propagate.extract(_Carrier(headers)) if headers else _ROOT
        name, attributes = middleware._traced_of(self._call).stream(delivery.stream)
        if delivery.attempt != 1:
            attributes = {**attributes, "messaging.message.delivery_count": delivery.attempt}
        correlation_id = _request_id(headers) if headers else None
        if correlation_id is not None:
            attributes = {**attributes, "messaging.message.conversation_id": correlation_id}
            request = trace.get_current_span(parent).get_span_context()
            if request.is_valid:  # a request sent with a trace context: its reply links to it
                self._answering = (correlation_id, request)
                middleware._answering[correlation_id] = request
        span = self._span = middleware._tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        )
        if span.is_recording():
            position = delivery.position
            if position is not None:
                span.set_attribute("messaging.message.id", str(position))
        self._token = otel_context.attach(trace.set_span_in_context(span))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self._span
        recording = span.is_recording()
        if exc is not None and recording:
            if isinstance(exc, trio.Cancelled):
                span.set_attribute("trio_streams.cancelled", True)  # a stop, not a failure
            else:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        otel_context.detach(self._token)
        answering = self._answering
        if answering is not None:
            requests = self._middleware._answering
            if requests.get(answering[0]) is answering[1]:
                del requests[answering[0]]  # unless another run of it has taken over
        if recording:
            call = self._call
            verdict = call.verdict
            if verdict is not None:
                outcome = "dead_letter" if verdict.dead_letter else verdict.outcome.kind.value
                span.set_attribute("trio_streams.outcome", outcome)
            if call.error is not None:
                span.record_exception(call.error)
                span.set_status(Status(StatusCode.ERROR, type(call.error).__name__))
        span.end()


def _request_id(headers: Mapping[str, str]) -> str | None:
    """The correlation id of a request delivery (it carries a reply-to and a correlation id);
    None for any other."""
    if REPLY_TO_HEADER not in headers:
        return None
    return headers.get(CORRELATION_HEADER)


class _Carrier(Mapping[str, str]):
    """The delivery's headers as a propagator's carrier (read only)."""

    __slots__ = ("_headers",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = headers

    def __getitem__(self, key: str) -> str:
        return self._headers[key]

    def __iter__(self) -> Any:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)
