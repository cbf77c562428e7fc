"""The in-process transport: named streams with a retained log, in memory.

Same semantics as the durable transports — live and replay subscriptions, consumer groups,
seeking with the same refusals, retries and dead letters — for tests and for wiring the parts
of one process together. ``app.test()`` runs any app on it.
"""

from .broker import MemoryBroker, MemoryTransport
from .log import MemoryHub
from .sources import MemoryStream

__all__ = ["MemoryBroker", "MemoryHub", "MemoryStream", "MemoryTransport"]
