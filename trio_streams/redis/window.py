"""The pipeline window as a pure state machine: slots, segments, commit order, the flush plan.

No I/O happens here but in :func:`send_items`, so every rule can be checked without a server;
one thin shell (:mod:`.window_shell`), used by the group subscription (:mod:`.group`) and the
reliable list (:mod:`.list_reliable`), feeds it reads and outcomes and sends the plans it makes.

The rules (docs/architecture.md, "The transport contract"; as users see them,
docs/guides/redis-streams.md, "The pipeline window"):

- Each delivery of a read takes a **slot**, named by a token (a stream entry id). A handler's
  ``ctx.pipeline`` commands go into the slot's **segment**, opened at the first command.
- The outcome decides the segment: ``ack`` keeps it (its place in the **commit order** is the
  moment of the settle); ``drop``, ``retry``, ``retry_after`` and a dead letter discard it.
  ``ack`` and ``drop`` are **consumed**: they are settled by the flush (one XACK). A retry or a
  dead letter is settled on its own, at once, as without a window; it only closes its slot.
- A delivery let go without a settle (abandoned at shutdown, purged) discards its segment and
  sends nothing: its entry stays pending, to be delivered again.
- A **flush is due** when every slot of a read has been decided (its settled deliveries reached
  what the read returned) — which includes "no unsettled delivery remains" — and at stop.
- A flush takes every kept segment not yet sent, in commit order (always a prefix of the commit
  order, so order holds across flushes), then the consumed tokens of each completed read, one
  settle per read (one ``XACK`` of the read's ids). Without ``atomic`` a kept segment is its
  commands; with ``atomic`` it travels as one MULTI/EXEC holding its commands and its own
  settle, and its token is not settled again with its read. At stop, the consumed tokens of
  incomplete reads go too (their undecided slots stay pending).

Without ``pipeline=True`` the same machine batches a group's acknowledgements, with no
segments: one code path settles both.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, final

from ..core.pipeline import Command, Pipeline, SegmentClosed

__all__ = ["FlushPlan", "KeptSegment", "Window", "plan_items", "send_items"]

Token = TypeVar("Token", bound=Hashable)


@final
@dataclass(frozen=True, slots=True)
class KeptSegment(Generic[Token]):
    """A segment the outcome ``ack`` kept: the commands, and the delivery they belong to."""

    token: Token
    commands: tuple[Command, ...]
    #: ``atomic``: the segment carries its delivery's settle (one MULTI/EXEC).
    settles: bool = False


@final
@dataclass(frozen=True, slots=True)
class FlushPlan(Generic[Token]):
    """What one flush sends: the kept segments in commit order, then, per read, the consumed
    tokens (``ack`` and ``drop``) that the read's one settle covers."""

    segments: tuple[KeptSegment[Token], ...]
    reads: tuple[tuple[Token, ...], ...]

    @property
    def tokens(self) -> list[Token]:
        """Every token this plan settles (a segment's own, under ``atomic``, included)."""
        settled = [t for read in self.reads for t in read]
        return settled + [s.token for s in self.segments if s.settles]


@dataclass(slots=True)
class _Read(Generic[Token]):
    """One read: how many of its slots are undecided, and what its settle will cover."""

    open: int
    consumed: list[Token] = field(default_factory=list)


@dataclass(slots=True)
class _Slot(Generic[Token]):
    read: _Read[Token]
    segment: Pipeline | None = None


@final
@dataclass(slots=True)
class Window(Generic[Token]):
    """The window of one subscription (see the module docstring).

    ``new_segment`` makes the segment a handler's first command opens (the shell gives it the
    checks ``atomic`` needs in a cluster). ``atomic``: a kept segment carries its own settle.
    """

    new_segment: Callable[[], Pipeline] = Pipeline
    atomic: bool = False
    _slots: dict[Token, _Slot[Token]] = field(default_factory=dict)
    _kept: list[KeptSegment[Token]] = field(default_factory=list)
    #: Reads whose every slot is decided and whose settle is not yet taken.
    _complete: list[_Read[Token]] = field(default_factory=list)
    #: Segments kept and discarded so far (for metrics and tests).
    kept_segments: int = 0
    discarded_segments: int = 0

    # ---- a read arrives ----------------------------------------------------------------------

    def read(self, tokens: Sequence[Token]) -> None:
        """A read returned deliveries named ``tokens``: each takes a slot."""
        if not tokens:
            return
        read: _Read[Token] = _Read(len(tokens))
        for token in tokens:
            if token in self._slots:
                raise ValueError(f"a slot for {token!r} is already open")
            self._slots[token] = _Slot(read)

    def holds(self, token: Token) -> bool:
        """Whether ``token`` has an undecided slot."""
        return token in self._slots

    @property
    def unsettled(self) -> int:
        """Slots not yet decided."""
        return len(self._slots)

    # ---- the handler -------------------------------------------------------------------------

    def segment(self, token: Token) -> Pipeline:
        """The slot's segment, opened at the first call (``ctx.pipeline``). Raises
        :class:`SegmentClosed` once the delivery was settled (its slot closed)."""
        slot = self._slots.get(token)
        if slot is None:
            raise SegmentClosed(
                f"the delivery {token!r} was already settled: its segment takes no more commands"
            )
        if slot.segment is None:
            slot.segment = self.new_segment()
        return slot.segment

    # ---- outcomes ----------------------------------------------------------------------------

    def decide_segment(self, token: Token, *, keep: bool) -> bool:
        """The outcome decided the segment now (``keep`` for ``ack``), before the slot closes:
        a ``retry`` the core holds in an ordered lane decides it when the handler returns.
        Returns whether a segment was kept. A later attempt of the same delivery opens a new
        segment."""
        slot = self._slot(token)
        segment, slot.segment = slot.segment, None
        if segment is None:
            return False
        segment.close(
            f"the window already {'kept' if keep else 'discarded'} this delivery's segment "
            f"({token!r}): a command queued after its handler returned is never sent"
        )
        commands = segment.commands
        if not commands:
            return False
        if not keep:
            self.discarded_segments += 1
            return False
        self._kept.append(KeptSegment(token, commands, settles=self.atomic))
        self.kept_segments += 1
        return True

    def consumed(self, token: Token, *, keep: bool) -> bool:
        """``ack`` (``keep``) or ``drop``: the flush settles it. True when a flush is due."""
        slot = self._slots.get(token)
        if slot is not None and slot.segment is None:
            # No segment to decide (the common case, once per delivery): the read's settle
            # covers it and the slot closes, as below, in one lookup.
            del self._slots[token]
            read = slot.read
            read.consumed.append(token)
            read.open -= 1
            if read.open == 0:
                self._complete.append(read)
            return bool(self._complete)
        if not (self.decide_segment(token, keep=keep) and self.atomic):
            self._slot(token).read.consumed.append(token)
        return self._close(token)

    def consumed_in_read(self, token: Token) -> bool:
        """``consumed(token)`` where that is all it does: the slot has no segment, its read
        has other undecided slots and no flush is due, so the token joins its read's settle
        and the slot closes (True). Otherwise nothing is done (False): ``consumed`` decides
        what else the outcome means (a segment, a read it completes)."""
        if self._complete:
            return False
        slot = self._slots.get(token)
        if slot is None or slot.segment is not None or slot.read.open == 1:
            return False
        del self._slots[token]
        read = slot.read
        read.consumed.append(token)
        read.open -= 1
        return True

    def settled_alone(self, token: Token) -> bool:
        """Settled on its own (a retry copy, a delayed retry, a dead letter): the segment is
        discarded and the slot closes. True when a flush is due."""
        self.decide_segment(token, keep=False)
        return self._close(token)

    def let_go(self, token: Token) -> bool:
        """Ended without a settle: the segment is discarded, nothing is sent for it (the entry
        stays pending). True when a flush is due. A token with no slot is ignored."""
        if token not in self._slots:
            return False
        self.decide_segment(token, keep=False)
        return self._close(token)

    # ---- flushing ----------------------------------------------------------------------------

    @property
    def due(self) -> bool:
        """Whether a read completed with something to send (and a flush has not taken it)."""
        return bool(self._complete)

    def take(self) -> FlushPlan[Token] | None:
        """The kept segments and the completed reads' settles, as one plan (None when no read
        completed: kept segments wait for one, which is always coming)."""
        if not self._complete:
            return None
        return self._plan(self._complete)

    def stop(self) -> FlushPlan[Token] | None:
        """The subscription stops: the plan of everything decided, incomplete reads' consumed
        tokens too (their undecided slots stay as they are: those entries stay pending)."""
        reads = list(self._complete)
        seen = {id(r) for r in reads}
        for slot in self._slots.values():
            if id(slot.read) not in seen and slot.read.consumed:
                seen.add(id(slot.read))
                reads.append(slot.read)
        if not reads and not self._kept:
            return None
        return self._plan(reads)

    def _plan(self, reads: list[_Read[Token]]) -> FlushPlan[Token]:
        plan = FlushPlan(tuple(self._kept), tuple(tuple(r.consumed) for r in reads if r.consumed))
        for read in reads:
            read.consumed = []
        self._kept = []
        self._complete = []
        return plan

    def _slot(self, token: Token) -> _Slot[Token]:
        try:
            return self._slots[token]
        except KeyError:
            raise KeyError(f"no open slot for {token!r}") from None

    def _close(self, token: Token) -> bool:
        read = self._slots.pop(token).read
        read.open -= 1
        if read.open == 0 and (read.consumed or self._kept):
            self._complete.append(read)
        return self.due


def plan_items(
    plan: FlushPlan[Token],
    *,
    settle: Callable[[Sequence[Token]], Sequence[Command]],
    chunk: int = 1000,
) -> list[Command | list[Command]]:
    """The plan as what to send, in order: a command, or a list of commands for one MULTI/EXEC.

    ``settle(tokens)`` gives the commands that settle ``tokens`` (a stream: ``XACK key group
    ids...``; with ``delete_on_ack`` an ``XDEL`` too — more than one command travels as one
    MULTI/EXEC). Settles are cut in ``chunk`` tokens each.
    """
    items: list[Command | list[Command]] = []
    for segment in plan.segments:
        if segment.settles:
            items.append([*segment.commands, *settle([segment.token])])
        else:
            items.extend(segment.commands)
    for read in plan.reads:
        for i in range(0, len(read), chunk):
            commands = list(settle(read[i : i + chunk]))
            items.append(commands if len(commands) > 1 else commands[0])
    return items


class _Sender(Protocol):
    """What :func:`send_items` needs of a client: ``execute`` and ``pipeline``."""

    async def execute(self, *args: Any) -> Any: ...

    def pipeline(self) -> Any: ...


async def send_items(client: _Sender, items: Sequence[Command | list[Command]]) -> list[Any]:
    """Send what :func:`plan_items` made in one exchange; one reply per item (a transaction's
    is the list of its replies, errors in place). A lone command goes as itself. Raises the
    client's ``RedisError`` when the exchange itself failed (nothing is known to have run).
    The one I/O step of the window, shared by every shell."""
    if len(items) == 1 and isinstance(items[0], tuple):
        return [await client.execute(*items[0])]
    pipeline = client.pipeline()
    for item in items:
        if isinstance(item, list):
            pipeline.add_transaction(item)
        else:
            pipeline.add(*item)
    return list(await pipeline.execute())
