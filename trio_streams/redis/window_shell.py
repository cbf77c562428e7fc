"""The I/O around the pipeline window (:mod:`.window`), one shell for every Redis subscription
that settles through it: a consumer group member (:mod:`.group`) and a reliable list
(:mod:`.list_reliable`).

The window decides (pure: slots, segments, commit order, the flush plan); the shell feeds it
reads and outcomes and sends the plans it makes, on the path that must never lose an ack:

- ``ack`` and ``drop`` go into the window (:meth:`WindowShell.consumed`); when a read is
  complete, the settle that completed it sends the flush itself.
- A delivery settled on its own (a retry, a dead letter) or let go without a settle closes its
  slot; a flush that becomes due then is sent by the flush task (:meth:`WindowShell.flush_loop`):
  ``unsettled`` must not block.
- Flushes leave one after another under :attr:`WindowShell.lock`, so commit order holds across
  them; the subscription's run counts are sent under the same lock, so they never overtake a
  settle.
- What a flush's end means for its entries is the subscription's (:class:`Settler`): a failed
  exchange leaves them pending (and a lost connection charges no run of theirs), a failed
  settle inside it leaves them pending too, a flush that went through settles them.
- At stop (:meth:`WindowShell.stop`) everything decided is sent, incomplete reads' settles
  included; undecided deliveries stay pending.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, Protocol, TypeVar, final

import trio

from ..core.delivery import Delivery
from ..core.host import SubscriptionHost
from ..core.pipeline import Command, CommandCheck, Pipeline
from ..core.transport import SourceFault
from .client import ReadOnlyError, RedisConnectionError
from .client.errors import RedisError
from .window import FlushPlan, Window, plan_items, send_items

__all__ = ["Settler", "WindowShell"]

Token = TypeVar("Token", bound=Hashable)


class Settler(Protocol[Token]):
    """What a subscription tells its window shell: how its settles are written, and what the
    end of a flush means for the entries the flush carried."""

    def settle_commands(self, tokens: Sequence[Token]) -> list[Command]:
        """The commands that settle ``tokens`` (more than one travel as one MULTI/EXEC)."""
        ...

    def unsent(self, plan: FlushPlan[Token], exc: RedisError, *, lost: bool) -> str:
        """The exchange failed, nothing is known to have run: the plan's entries stay
        pending (``lost``: the connection went, so the runs whose settle it lost are not
        charged). Returns what the fault says."""
        ...

    def interrupted(self, plan: FlushPlan[Token]) -> None:
        """The flush was cancelled (or failed otherwise) on its way: what its entries become."""
        ...

    async def flushed(self, plan: FlushPlan[Token], *, failed: bool) -> None:
        """The server answered: the plan's entries are settled, unless ``failed`` (a settle
        inside the flush failed: they stay pending)."""
        ...


@final
class WindowShell(Generic[Token]):
    """The window of one subscription and the I/O around it (see the module docstring).

    ``windowed``: handlers have segments (``pipeline=True``); without it the window only
    batches settles. ``chunk``: tokens per settle command (a stream's ``XACK`` takes many, a
    list's ``LREM`` one)."""

    def __init__(
        self,
        client: Any,
        settler: Settler[Token],
        *,
        windowed: bool,
        atomic: bool,
        segment_check: CommandCheck | None,
        chunk: int,
    ) -> None:
        self._client = client
        self._settler = settler
        self._chunk = chunk
        self.windowed = windowed
        self.window: Window[Token] = Window(lambda: Pipeline(segment_check), atomic=atomic)
        #: Flushes leave one after another, so commit order holds across them.
        self.lock = trio.Lock()
        self._wanted = trio.Event()
        #: Notes a delivery acknowledged or dropped with no segment to lose (a successor may
        #: settle it): the subscription's, set before its first read.
        self.finished: Callable[[Delivery], None] = lambda delivery: None

    # ---- the window's side ---------------------------------------------------------------------

    def read(self, tokens: Sequence[Token]) -> None:
        """A read returned deliveries named ``tokens``."""
        self.window.read(tokens)

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        """``delivery``'s segment (``ctx.pipeline``), or None without ``pipeline=True``."""
        if not self.windowed:
            return None
        return self.window.segment(delivery.handle)

    def deferred(self, delivery: Delivery) -> None:
        """Held for a retry: the handler's outcome discards its segment now."""
        if self.window.holds(delivery.handle):
            self.window.decide_segment(delivery.handle, keep=False)

    def consumed(self, delivery: Delivery, *, keep: bool) -> bool:
        """``ack`` (``keep``) or ``drop``: the flush settles it. True when a flush is due: the
        caller awaits :meth:`flush` then (its settle sends it)."""
        if not self.windowed:  # no segment to lose: a successor may settle it
            self.finished(delivery)
        return self.window.consumed(delivery.handle, keep=keep)

    def consumed_in_line(self, delivery: Delivery) -> bool:
        """``ack`` settled at once, where :meth:`consumed` would make no flush due and the
        delivery has no segment: what ``consumed(delivery, keep=True)`` does then, and True.
        False, nothing done, where it would do more: the caller settles the general way."""
        if self.windowed or not self.window.consumed_in_read(delivery.handle):
            return False
        self.finished(delivery)
        return True

    def consumed_later(self, delivery: Delivery) -> None:
        """``drop`` decided where a settle cannot wait (``unsettled``): the flush settles it;
        one that became due goes to the flush task."""
        if self.consumed(delivery, keep=False):
            self._wanted.set()

    def settled_alone(self, token: Token) -> None:
        """Settled by a step of its own (a retry, a dead letter, failed or not): the slot
        closes; a flush that became due goes to the flush task."""
        if self.window.settled_alone(token):
            self._wanted.set()

    def let_go(self, token: Token) -> None:
        """Ended without a settle (``unsettled``, which cannot wait): the slot closes; a flush
        that became due goes to the flush task."""
        if self.window.let_go(token):
            self._wanted.set()

    # ---- sending -------------------------------------------------------------------------------

    async def flush(self) -> bool:
        """Send what the window decided (one plan at a time, in commit order); False when
        there was nothing to send. A failure is a :class:`SourceFault`: entries whose settle
        failed stay pending, delivered again."""
        async with self.lock:
            plan = self.window.take()
            if plan is None:
                await trio.lowlevel.checkpoint()
                return False
            await self._send(plan)
            return True

    async def stop(self) -> None:
        """The subscription closes: send everything decided (incomplete reads' settles too).
        A failure is a :class:`SourceFault`, its entries left pending."""
        async with self.lock:
            plan = self.window.stop()
            if plan is None:
                await trio.lowlevel.checkpoint()
            else:
                await self._send(plan)

    async def flush_loop(self, host: SubscriptionHost) -> None:
        """Send the flushes that became due without a settle to send them (the last delivery
        of a read let go, or settled on its own). A failure is the fault ``flush``, cleared
        by a flush the server took (never by one of nothing). Cancelled with the
        subscription: :meth:`stop` sends what is left."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            try:
                sent = await self.flush()
            except SourceFault as exc:
                host.report_fault("flush", exc.message, error=exc)
            else:
                if sent:
                    host.clear_fault("flush")

    async def _send(self, plan: FlushPlan[Token]) -> None:
        items = plan_items(plan, settle=self._settler.settle_commands, chunk=self._chunk)
        try:
            replies = await send_items(self._client, items)
        except RedisError as exc:
            lost = isinstance(exc, RedisConnectionError | ReadOnlyError)
            raise SourceFault("flush", self._settler.unsent(plan, exc, lost=lost)) from exc
        except BaseException:
            self._settler.interrupted(plan)
            raise
        failures = _failures(items, replies)
        await self._settler.flushed(plan, failed=bool(failures))
        if failures:
            raise SourceFault("flush", f"flush of {len(items)} items: {'; '.join(failures)}")


def _failures(items: Sequence[Command | list[Command]], replies: Sequence[Any]) -> list[str]:
    """What went wrong in a flush's replies, one line each: a segment command that failed
    (the entry is still settled: Redis has no rollback), or a settle that failed (the entry
    stays pending)."""
    out: list[str] = []
    for item, reply in zip(items, replies, strict=True):
        if isinstance(reply, RedisError):
            what = "MULTI/EXEC of a segment" if isinstance(item, list) else _name(item)
            out.append(f"{what}: {reply}")
        elif isinstance(item, list) and isinstance(reply, list):
            for command, result in zip(item, reply, strict=False):
                if isinstance(result, RedisError):
                    out.append(f"{_name(command)} inside MULTI/EXEC: {result}")
    return out


def _name(command: Command) -> str:
    name = command[0]
    return name if isinstance(name, str) else name.decode(errors="replace")
