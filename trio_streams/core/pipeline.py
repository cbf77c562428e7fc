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

from .errors import ConfigurationError, TrioStreamsError

__all__ = ["Command", "CommandCheck", "Pipeline", "Segment", "SegmentClosed"]

#: Commands a segment cannot hold: the window frames segments itself.
_REFUSED = {
    "MULTI": "the window wraps segments in MULTI/EXEC itself (atomic=True)",
    "EXEC": "the window wraps segments in MULTI/EXEC itself (atomic=True)",
    "DISCARD": "the window wraps segments in MULTI/EXEC itself (atomic=True)",
    "WATCH": "a segment is sent after the handler returns, so WATCH cannot guard it",
    "UNWATCH": "a segment is sent after the handler returns, so WATCH cannot guard it",
}

#: One command as it is sent: its name (upper case), then its arguments. Numbers are kept as
#: the text Redis receives (``2.0`` as ``"2.0"``), so a recorded segment equals what was sent.
Command = tuple[str | bytes, ...]
#: Checks one command as it is queued; raises to refuse it (see ``atomic=True``).
CommandCheck = Callable[[Command], None]


class SegmentClosed(TrioStreamsError):
    """A command was queued on a segment the window had already decided (the handler returned
    and its outcome kept or discarded the segment): it would never be sent, so it is refused.
    Queue commands while the handler runs, on the ``ctx.pipeline`` of that delivery."""


def _argument(name: str, arg: object) -> str | bytes:
    if isinstance(arg, str | bytes):
        return arg
    if isinstance(arg, int) and not isinstance(arg, bool):
        return str(arg)
    if isinstance(arg, float):
        if arg != arg or arg in (float("inf"), float("-inf")):
            raise ConfigurationError(f"{name}: {arg!r} is not a number Redis takes")
        return repr(arg)
    raise ConfigurationError(
        f"{name}: arguments are str, bytes, int or float, not {type(arg).__name__}"
    )


#: Command names as given -> their checked words (``"xinfo stream"`` -> ``("XINFO",
#: "STREAM")``): a name is checked and split once, not at every command. Bounded.
_WORDS: dict[str, tuple[str, ...]] = {}
_WORDS_LIMIT = 4096


def _words(name: object) -> tuple[str, ...]:
    if not isinstance(name, str) or not name or not name.replace(" ", "").isalnum():
        raise ConfigurationError(f"a command name is a word like 'HSET', not {name!r}")
    words = tuple(name.upper().split())
    if words[0] in _REFUSED:
        raise ConfigurationError(f"{words[0]}: {_REFUSED[words[0]]}; queue the commands themselves")
    if len(_WORDS) < _WORDS_LIMIT:
        _WORDS[name] = words
    return words


@final
class Pipeline:
    """The commands one delivery's handler queued, in order (its segment of the window).

    A window that must refuse some commands (``atomic=True`` in a cluster: every key in the
    subscription key's slot) gives the segment a ``check``: a refused command raises at the
    call, in the handler, and is not queued. Once the window decided the segment (the outcome
    kept or discarded it), it is closed: a command queued later raises :class:`SegmentClosed`.
    """

    __slots__ = ("_check", "_closed", "_commands")

    def __init__(self, check: CommandCheck | None = None) -> None:
        self._commands: list[Command] = []
        self._check = check
        #: Why the segment takes no more commands (None while it is open).
        self._closed: str | None = None

    def command(self, name: str, *args: str | bytes | int | float) -> None:
        """Queue ``name *args`` (e.g. ``command("HSET", key, field, value)``). Not sent now."""
        words = _WORDS.get(name) if type(name) is str else None
        if words is None:
            words = _words(name)
        if self._closed is not None:
            raise SegmentClosed(f"{' '.join(words)} not queued: {self._closed}")
        command: Command = (
            *words,
            *[a if type(a) is str or type(a) is bytes else _argument(words[0], a) for a in args],
        )
        if self._check is not None:
            self._check(command)
        self._commands.append(command)

    def close(self, why: str) -> None:
        """Take no more commands (the window decided the segment): ``why`` says so to a
        handler that kept the pipeline and queues after it returned."""
        if self._closed is None:
            self._closed = why

    def __getattr__(self, name: str) -> Callable[..., None]:
        """``pipeline.incrby(key, 1)`` queues ``INCRBY key 1``: any lower-case command name
        (``xinfo_stream`` for ``XINFO STREAM``). The method is made once per name."""
        if name.startswith("_") or not name.islower() or not name.replace("_", "").isalnum():
            raise AttributeError(name)
        command = name.replace("_", " ")
        _words(command)  # a refused name raises here, before a method is made for it

        def queue(self: Pipeline, *args: str | bytes | int | float) -> None:
            self.command(command, *args)

        queue.__name__ = queue.__qualname__ = name
        queue.__doc__ = f"Queue ``{command.upper()} *args``."
        setattr(Pipeline, name, queue)  # the next lookup finds it without __getattr__
        return getattr(self, name)  # type: ignore[no-any-return]

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
