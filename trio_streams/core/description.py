"""What a transport says of itself: how documents and traces name its brokers and sources.

The core and the integrations know no transport by name. A broker describes itself
(:class:`BrokerDescription`: its kind, its ``messaging.system``, its AsyncAPI server and how it
writes each kind of destination), and so does a source (:class:`SourceDescription`: how it reads
its channels, how it writes its dead letters, its consumer group). The AsyncAPI document
(:mod:`trio_streams.integrations.asyncapi`) and the tracing middleware
(:mod:`trio_streams.integrations.otel`) read these and nothing else, so a new transport is
documented and traced as it says, without a change to either.

Descriptions are plain immutable values, computed from what the broker or source was declared
with; reading one never connects to anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, final

from .destinations import DestinationKind

__all__ = ["Binding", "BrokerDescription", "Server", "SourceDescription"]


class Server(TypedDict):
    """A broker's AsyncAPI server object (the document shows its keys in the order they were
    given)."""

    host: str
    protocol: str
    pathname: NotRequired[str]
    description: str


@final
@dataclass(frozen=True, slots=True)
class Binding:
    """How a transport reads or writes one channel, as an AsyncAPI channel binding: the
    protocol it belongs to (``redis``) and its fields (``{"method": "xreadgroup",
    "groupName": "billing"}``), in the order the document shows them."""

    protocol: str
    #: A field may be None where what it names is not known before the app runs (JSON null).
    fields: Mapping[str, str | None]

    def asyncapi(self) -> dict[str, dict[str, str | None]]:
        """The channel's ``bindings`` object (a binding whose version no one registered is
        ``custom``)."""
        return {self.protocol: {**self.fields, "bindingVersion": "custom"}}


@final
@dataclass(frozen=True, slots=True)
class BrokerDescription:
    """What a broker says of itself (``Broker.description``)."""

    #: Its kind, as middlewares see it (``HandlerCall.kind``): ``redis``, ``file``, ``memory``.
    kind: str
    #: ``messaging.system`` of its spans: ``redis``, or ``trio_streams.<kind>`` for a system
    #: OpenTelemetry does not name.
    system: str
    #: Its AsyncAPI server.
    server: Server
    #: How it writes each kind of destination; a kind it has no binding for is absent (a
    #: transport without AsyncAPI bindings gives none).
    writes: Mapping[DestinationKind, Binding] = field(default_factory=dict)


@final
@dataclass(frozen=True, slots=True)
class SourceDescription:
    """What a source says of how its transport reads it (``Source.description``)."""

    #: ``messaging.system`` of the spans of its deliveries (its transport's, as its broker
    #: says it); None: ``trio_streams.<kind>`` of its broker's kind.
    system: str | None = None
    #: How it reads each of its channels (one binding for all of them); None: no binding.
    reads: Binding | None = None
    #: How its subscription writes a dead letter (``dead_letter=``); None: no binding.
    dead_letters: Binding | None = None
    #: The consumer group it reads through, for traces; None where it reads without one or
    #: does not say (a group named per subscription at mount).
    group: str | None = None
