"""An app whose only subscription fails once running: `trio-streams run` must say why."""

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.core.delivery import Delivery
from trio_streams.core.transport import Source, SubscriptionSource, Transport
from trio_streams.memory import MemoryTransport
from trio_streams.memory.broker import MemorySubscription


class BrokenReader(MemorySubscription):
    async def read(self) -> Sequence[Delivery] | None:
        raise OSError("the disk is on fire")


class BrokenTransport(MemoryTransport):
    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        stream = source.in_process()
        assert isinstance(stream, MemoryStream)
        return BrokenReader(self.hub, stream, label=label, count=1)


class BrokenBroker(MemoryBroker):
    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        yield BrokenTransport(self.hub)


app = App("doomed")
broker = app.broker(BrokenBroker())


@broker.subscriber(MemoryStream("work"), name="work")
async def work(n: int) -> None: ...
