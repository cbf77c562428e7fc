"""An app subscribing by plain names on each broker, for ``trio-streams asyncapi``."""

from __future__ import annotations

from trio_streams import App, MemoryBroker
from trio_streams.file import FileBroker
from trio_streams.redis import RedisBroker

app = App("names")
redis = app.broker(RedisBroker("redis://127.0.0.1:1", group="billing"))
log = app.broker(FileBroker("names.ss"))
memory = app.broker(MemoryBroker())


@redis.subscriber("orders")
async def bill(order: int) -> None:
    """Bill an order."""


@log.subscriber("orders")
async def archive(order: int) -> None:
    """Keep an order."""


@memory.subscriber("orders")
async def count(order: int) -> None:
    """Count an order."""
