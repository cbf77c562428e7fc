"""trio-streams: a Trio-native framework for message-driven services."""

from ._version import __version__

__all__ = ["__version__"]
