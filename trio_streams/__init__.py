"""trio-streams: a Trio-native framework for message-driven services.

Write ``async def`` handlers, mount them on subscriptions, run the app. Every subscription's
driver is owned by a nursery, memory channels carry deliveries and seek commands, and shutdown
drains in-flight work instead of abandoning it.
"""

from ._version import __version__
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
