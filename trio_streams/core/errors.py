"""The exception hierarchy: every error trio-streams raises on purpose derives from one base.

Errors carry context (which subscription, which file and byte offset, which server) so the
message alone tells an operator what failed and where. Transports add their own subclasses in
their packages (``trio_streams.file.errors``, ``trio_streams.redis.client.errors``).
"""

from __future__ import annotations

__all__ = [
    "BaseExceptionRaised",
    "ConfigurationError",
    "TrioStreamsError",
    "UnsupportedError",
    "WrongKeyType",
]


class TrioStreamsError(Exception):
    """Base class of every error trio-streams raises on purpose."""

    def hint(self) -> str | None:
        """What to do about it, where something general can be said: the one-line report of a
        failure that stops an app or a command shows it after the message."""
        return None


class ConfigurationError(TrioStreamsError, ValueError):
    """An app, broker or subscription was declared in a way that cannot work."""


class UnsupportedError(ConfigurationError):
    """A transport was asked for something it cannot do.

    Raised at mount time for what a subscription declares (its source, its options), and at run
    time for a capability a handler asks for that its source lacks (``ctx.seeker.seek`` on a
    source that cannot seek), as soon as it asks.
    """


class WrongKeyType(TrioStreamsError):
    """A key holds another type of value than the one it is used as (a Redis list that is a
    stream, a delay set that is a string, ...); the message names the key and what it holds.
    Redis keys share one namespace, and so do the in-process lists and streams of a Redis
    broker under ``app.test()``."""

    def hint(self) -> str:
        # The key is named in the message; nothing in a traceback would add to it.
        return "use another key, or delete this one"


class BaseExceptionRaised(TrioStreamsError):
    """A handler, hook or task raised a ``BaseException`` that is not a cancellation:
    ``sys.exit()``, or a class of its own derived from ``BaseException``. Nothing but a
    cancellation may leave user code that way, so the app stops, as on any fatal error; the
    message names the code that raised it, and ``__cause__`` is what it raised."""

    def hint(self) -> str:
        return "raise an Exception instead: a handler's goes to its failure policy"
