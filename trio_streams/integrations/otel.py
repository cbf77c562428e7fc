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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
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
#: Sources whose description is kept (one per subscription traced); past it, the cache starts over.
_KEPT_SOURCES = 1024


class TracingMiddleware(Middleware):
    """Spans per delivery and per publish, with the trace context in the headers (see the
    module). ``tracer_provider`` defaults to the global one."""

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        #: What each source says of itself for traces, by identity (sources are immutable):
        #: the source, its ``messaging.system`` and its consumer group.
        self._sources: dict[int, tuple[Source, str, str | None]] = {}
        #: The creation context of each request being handled (from its headers), by its
        #: correlation id, while its handling lasts: the reply's span links to it.
        self._answering: dict[str, SpanContext] = {}

    def _described(self, call: HandlerCall) -> tuple[Source, str, str | None]:
        """``call.source``'s system and group, described once per source, not per delivery."""
        source = call.source
        known = self._sources.get(id(source))
        if known is None or known[0] is not source:
            if len(self._sources) >= _KEPT_SOURCES:
                self._sources.clear()
            described = source.description()
            system = described.system or f"trio_streams.{call.kind}"
            known = self._sources[id(source)] = (source, system, described.group)
        return known

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        delivery = call.delivery
        parent = propagate.extract(_Carrier(delivery.headers))
        _, system, group = self._described(call)
        attributes: dict[str, Any] = {
            "messaging.system": system,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": delivery.stream,
            "messaging.message.delivery_count": delivery.attempt,
            "trio_streams.subscription": call.subscription,
        }
        if delivery.position is not None:
            attributes["messaging.message.id"] = str(delivery.position)
        if group is not None:
            attributes["messaging.consumer.group.name"] = group
        correlation_id = _request_id(delivery.headers)
        answering: tuple[str, SpanContext] | None = None
        if correlation_id is not None:
            attributes["messaging.message.conversation_id"] = correlation_id
            request = trace.get_current_span(parent).get_span_context()
            if request.is_valid:  # a request sent with a trace context: its reply links to it
                answering = (correlation_id, request)
                self._answering[correlation_id] = request
        span = self._tracer.start_span(
            f"process {delivery.stream}", context=parent, kind=SpanKind.CONSUMER,
            attributes=attributes,
        )  # fmt: skip
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        except trio.Cancelled:
            span.set_attribute("trio_streams.cancelled", True)  # a stop, not a failure
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            if answering is not None and self._answering.get(answering[0]) is answering[1]:
                del self._answering[answering[0]]  # unless another run of it has taken over
            verdict = call.verdict
            if verdict is not None:
                outcome = "dead_letter" if verdict.dead_letter else verdict.outcome.kind.value
                span.set_attribute("trio_streams.outcome", outcome)
            if call.error is not None:
                span.record_exception(call.error)
                span.set_status(Status(StatusCode.ERROR, type(call.error).__name__))
            span.end()

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
