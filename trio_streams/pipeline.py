"""``Pipeline``: commands a handler queues to run with its delivery's acknowledgement.

A subscription mounted with ``pipeline=True`` on a transport that has a pipeline window (Redis
streams and reliable lists; the in-process transport emulates it for ``app.test()``) gives each
delivery a segment of the window. A handler reaches it as ``ctx.pipeline``, or declares a
parameter annotated ``Pipeline``::

    @redis.subscriber(RedisStream("orders"), pipeline=True)
    async def total(order: Order, pipeline: Pipeline) -> None:
        pipeline.incrbyfloat(f"total:{order.id}", order.amount)   # sent with the XACK

What a handler queues is only recorded here, never sent: the handler never sees a reply. The
outcome decides the segment — ``ack`` keeps it, ``drop``, ``retry`` and ``retry_after`` discard
it, and a delivery that ends without a settle discards it — and the window sends what it kept,
in commit order, with the read's acknowledgements. A handler that declares a ``Pipeline`` on a
subscription without a window is refused at mount; ``ctx.pipeline`` there raises
``UnsupportedError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from .errors import ConfigurationError

__all__ = ["Command", "Pipeline", "Segment"]

#: One command: its name, then its arguments, as Redis takes them.
Command = tuple[str | bytes | int | float, ...]
_ARGUMENT_TYPES = (str, bytes, int, float)


@final
class Pipeline:
    """The commands one delivery's handler queued, in order (its segment of the window)."""

    __slots__ = ("_commands",)

    def __init__(self) -> None:
        self._commands: list[Command] = []

    def command(self, name: str, *args: str | bytes | int | float) -> None:
        """Queue ``name *args`` (e.g. ``command("HSET", key, field, value)``). Not sent now."""
        if not isinstance(name, str) or not name or not name.replace(" ", "").isalnum():
            raise ConfigurationError(f"a command name is a word like 'HSET', not {name!r}")
        for arg in args:
            if isinstance(arg, bool) or not isinstance(arg, _ARGUMENT_TYPES):
                raise ConfigurationError(
                    f"{name}: arguments are str, bytes, int or float, not {type(arg).__name__}"
                )
        self._commands.append((*name.upper().split(), *args))

    def __getattr__(self, name: str) -> Callable[..., None]:
        """``pipeline.incrby(key, 1)`` queues ``INCRBY key 1``: any lower-case command name."""
        if name.startswith("_") or not name.islower():
            raise AttributeError(name)

        def queue(*args: str | bytes | int | float) -> None:
            self.command(name.replace("_", " ").upper(), *args)

        return queue

    @property
    def commands(self) -> tuple[Command, ...]:
        return tuple(self._commands)

    def __len__(self) -> int:
        return len(self._commands)

    def __repr__(self) -> str:
        return f"<Pipeline {len(self._commands)} command(s)>"


@final
@dataclass(frozen=True, slots=True)
class Segment:
    """What became of one delivery's segment: its commands, and whether the window kept them."""

    subscription: str
    stream: str
    commands: tuple[Command, ...]
    #: True: sent with the acknowledgement (the outcome was ``ack``); False: discarded.
    kept: bool
    #: The outcome kind that decided it, or the reason it ended unsettled (``stale``,
    #: ``purged``, ``abandoned``).
    decided_by: str
