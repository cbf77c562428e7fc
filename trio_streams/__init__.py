"""trio-streams: a Trio-native framework for message-driven services.

Write ``async def`` handlers, mount them on subscriptions, run the app. Every subscription's
driver is owned by a nursery, memory channels carry deliveries and seek commands, and shutdown
drains in-flight work instead of abandoning it.

Importing the package is cheap: each name below is imported from its module the first time it
is used (``from trio_streams import App`` imports ``trio_streams.core.app``), so ``trio-streams
run`` can guard SIGINT and SIGTERM before Trio and the app are imported (``cli/commands.py``).
"""

from ._moved import install as _install_moved

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a few ms)

_install_moved()  # the modules' paths of the flat layout still import (with a warning)

if TYPE_CHECKING:
    from ._version import __version__
    from .core.app import App, AppFailed, Health, HealthState, RunningApp, State
    from .core.broker import Broker, NotConnected
    from .core.codec import DecodeError, EncodeError
    from .core.context import Context
    from .core.delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER, Delivery
    from .core.destinations import Destination
    from .core.driver import Seeker
    from .core.errors import ConfigurationError, TrioStreamsError, UnsupportedError
    from .core.extras import MissingExtra
    from .core.handler import Depends, Header, Headers
    from .core.logs import JsonFormatter
    from .core.middleware import HandlerCall, Middleware, PublishCall, RequestCall
    from .core.outcome import Outcome, ack, drop, retry, retry_after
    from .core.pipeline import Pipeline, SegmentClosed
    from .core.positions import InvalidPosition, Position
    from .core.replies import RemoteError, Reply
    from .core.requests import NoResponders, ReplyLost, RequestTimeout
    from .core.routing import Publisher, Router
    from .core.transport import SeekRefused, Sharing
    from .memory import MemoryBroker, MemoryStream

__all__ = [
    "RETRY_COUNT_HEADER",
    "RETRY_TARGET_HEADER",
    "App",
    "AppFailed",
    "Broker",
    "ConfigurationError",
    "Context",
    "DecodeError",
    "Delivery",
    "Depends",
    "Destination",
    "EncodeError",
    "HandlerCall",
    "Header",
    "Headers",
    "Health",
    "HealthState",
    "InvalidPosition",
    "JsonFormatter",
    "MemoryBroker",
    "MemoryStream",
    "Middleware",
    "MissingExtra",
    "NoResponders",
    "NotConnected",
    "Outcome",
    "Pipeline",
    "Position",
    "PublishCall",
    "Publisher",
    "RemoteError",
    "Reply",
    "ReplyLost",
    "RequestCall",
    "RequestTimeout",
    "Router",
    "RunningApp",
    "SeekRefused",
    "Seeker",
    "SegmentClosed",
    "Sharing",
    "State",
    "TrioStreamsError",
    "UnsupportedError",
    "__version__",
    "ack",
    "drop",
    "retry",
    "retry_after",
]

#: Where each public name lives, for the lazy import below.
_EXPORTS: dict[str, str] = {
    "App": ".core.app",
    "AppFailed": ".core.app",
    "Health": ".core.app",
    "HealthState": ".core.app",
    "RunningApp": ".core.app",
    "State": ".core.app",
    "Broker": ".core.broker",
    "NotConnected": ".core.broker",
    "DecodeError": ".core.codec",
    "EncodeError": ".core.codec",
    "Context": ".core.context",
    "RETRY_COUNT_HEADER": ".core.delivery",
    "RETRY_TARGET_HEADER": ".core.delivery",
    "Delivery": ".core.delivery",
    "Destination": ".core.destinations",
    "Seeker": ".core.driver",
    "ConfigurationError": ".core.errors",
    "TrioStreamsError": ".core.errors",
    "UnsupportedError": ".core.errors",
    "Depends": ".core.handler",
    "Header": ".core.handler",
    "Headers": ".core.handler",
    "MemoryBroker": ".memory",
    "MemoryStream": ".memory",
    "MissingExtra": ".core.extras",
    "JsonFormatter": ".core.logs",
    "HandlerCall": ".core.middleware",
    "Middleware": ".core.middleware",
    "PublishCall": ".core.middleware",
    "RequestCall": ".core.middleware",
    "Outcome": ".core.outcome",
    "ack": ".core.outcome",
    "drop": ".core.outcome",
    "retry": ".core.outcome",
    "retry_after": ".core.outcome",
    "Pipeline": ".core.pipeline",
    "SegmentClosed": ".core.pipeline",
    "InvalidPosition": ".core.positions",
    "Position": ".core.positions",
    "RemoteError": ".core.replies",
    "Reply": ".core.replies",
    "NoResponders": ".core.requests",
    "ReplyLost": ".core.requests",
    "RequestTimeout": ".core.requests",
    "Publisher": ".core.routing",
    "Router": ".core.routing",
    "SeekRefused": ".core.transport",
    "Sharing": ".core.transport",
    "__version__": "._version",
}

if not TYPE_CHECKING:  # type checkers see the imports above; a typo stays an error there

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module, __name__), name)
        globals()[name] = value  # imported once: later uses are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS})
