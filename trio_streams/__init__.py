"""trio-streams: a Trio-native framework for message-driven services.

Write ``async def`` handlers, mount them on subscriptions, run the app. Every subscription's
driver is owned by a nursery, memory channels carry deliveries and seek commands, and shutdown
drains in-flight work instead of abandoning it.

Importing the package is cheap: each name below is imported from its module the first time it
is used (``from trio_streams import App`` imports ``trio_streams.app``), so ``trio-streams
run`` can guard SIGINT and SIGTERM before Trio and the app are imported (``cli.py``).
"""

from ._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a few ms)

if TYPE_CHECKING:
    from ._extras import MissingExtra
    from .app import App, AppFailed, Health, HealthState, RunningApp, State
    from .broker import Broker, NotConnected
    from .codec import DecodeError, EncodeError
    from .context import Context
    from .delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER, Delivery
    from .destinations import Destination
    from .driver import Seeker
    from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
    from .handler import Depends, Header, Headers
    from .memory import MemoryBroker, MemoryStream
    from .middleware import HandlerCall, Middleware, PublishCall
    from .outcome import Outcome, ack, drop, retry, retry_after
    from .pipeline import Pipeline, SegmentClosed
    from .positions import InvalidPosition, Position
    from .routing import Publisher, Router
    from .transport import SeekRefused, Sharing

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
    "MemoryBroker",
    "MemoryStream",
    "Middleware",
    "MissingExtra",
    "NotConnected",
    "Outcome",
    "Pipeline",
    "Position",
    "PublishCall",
    "Publisher",
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
    "App": ".app",
    "AppFailed": ".app",
    "Health": ".app",
    "HealthState": ".app",
    "RunningApp": ".app",
    "State": ".app",
    "Broker": ".broker",
    "NotConnected": ".broker",
    "DecodeError": ".codec",
    "EncodeError": ".codec",
    "Context": ".context",
    "RETRY_COUNT_HEADER": ".delivery",
    "RETRY_TARGET_HEADER": ".delivery",
    "Delivery": ".delivery",
    "Destination": ".destinations",
    "Seeker": ".driver",
    "ConfigurationError": ".errors",
    "TrioStreamsError": ".errors",
    "UnsupportedError": ".errors",
    "Depends": ".handler",
    "Header": ".handler",
    "Headers": ".handler",
    "MemoryBroker": ".memory",
    "MemoryStream": ".memory",
    "MissingExtra": "._extras",
    "HandlerCall": ".middleware",
    "Middleware": ".middleware",
    "PublishCall": ".middleware",
    "Outcome": ".outcome",
    "ack": ".outcome",
    "drop": ".outcome",
    "retry": ".outcome",
    "retry_after": ".outcome",
    "Pipeline": ".pipeline",
    "SegmentClosed": ".pipeline",
    "InvalidPosition": ".positions",
    "Position": ".positions",
    "Publisher": ".routing",
    "Router": ".routing",
    "SeekRefused": ".transport",
    "Sharing": ".transport",
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
