"""``RedisChannel``: what a Redis Pub/Sub subscription reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self, final

from ..core.description import Binding, SourceDescription
from ..core.errors import ConfigurationError
from ..core.sources import NamedSource
from ..memory.channels import MemoryChannel
from .streams import XADD

__all__ = ["RedisChannel"]

_GLOB_SPECIALS = frozenset("*?[]\\")
_DEAD_LETTER_KINDS = ("channel", "stream")


@final
@dataclass(frozen=True, slots=True, init=False, repr=False)
class RedisChannel(NamedSource):
    """One or more Redis Pub/Sub channels: ``SUBSCRIBE``, ``PSUBSCRIBE`` or ``SSUBSCRIBE``.

    - ``RedisChannel("news")`` — classic channels (``SUBSCRIBE``); several names, one
      subscription: ``RedisChannel("news", "sport")``.
    - ``RedisChannel("news.*", pattern=True)`` — glob patterns (``PSUBSCRIBE``): ``*``, ``?``,
      ``[a-z]``, ``[^...]``, ``\\`` escapes. A delivery's stream is the channel the message was
      published to, and a retry copy goes back to that channel.
    - ``RedisChannel("orders", sharded=True)`` — sharded channels (``SSUBSCRIBE``, Redis 7): in
      a cluster each lives on the node owning its slot, and the subscription keeps one reader per
      node that owns some of its channels. Published with
      ``Destination.channel("orders", sharded=True)`` (``SPUBLISH``); classic and sharded
      channels are apart on the server, so one never sees the other's messages.

    **At most once, by nature.** Redis keeps nothing for a channel: a message reaches whoever is
    subscribed when it is published, once. A message published while a subscriber is
    disconnected (a restart, a network cut, an output buffer the server gave up on) is gone for
    it; the subscription reports each such gap as the fault ``gap`` (when, how long, counted) and
    goes on. Nothing is acknowledged: ``ack`` and ``drop`` settle nothing; ``retry`` publishes a
    copy to the channel (every subscriber gets it, the others pass over it); ``retry_after`` is
    held by this process and lost if it dies. For work that must not be lost, use a stream
    (``RedisStream``) or a reliable list.

    ``dead_letter_kind`` says what the subscription's ``dead_letter="name"`` names:
    ``"channel"`` (the default) publishes the letter, with its ``x-dead-letter-*`` headers, to
    that channel (``SPUBLISH`` for a sharded source), where only its subscribers of the moment
    receive it, at most once like everything on a channel; ``"stream"`` appends it to that
    stream, where it is kept until read.

    No seeking and no start position (there is nothing to go back to). Under ``app.test()`` it
    runs on the in-process Pub/Sub bus, patterns matched by the server's rules.
    """

    label = "RedisChannel"
    shown = (("pattern", False), ("sharded", False), ("dead_letter_kind", "channel"))

    names: tuple[str, ...]
    pattern: bool
    sharded: bool
    dead_letter_kind: str

    def __init__(
        self,
        *names: str,
        pattern: bool = False,
        sharded: bool = False,
        dead_letter_kind: str = "channel",
    ) -> None:
        if not names:
            raise ConfigurationError("RedisChannel needs at least one channel name (or pattern)")
        for name in names:
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"channel names are non-empty strings, not {name!r}")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"channel names repeat: {names!r}")
        for what, value in (("pattern", pattern), ("sharded", sharded)):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{what} is True or False, not {value!r}")
        if pattern and sharded:
            raise ConfigurationError(
                f"RedisChannel{names!r}: Redis has no sharded patterns (there is no "
                "SPSUBSCRIBE): subscribe to the sharded channels by name, or use classic "
                "channels with a pattern"
            )
        if dead_letter_kind not in _DEAD_LETTER_KINDS:
            raise ConfigurationError(
                f"dead_letter_kind is 'channel' or 'stream', not {dead_letter_kind!r}"
            )
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "sharded", sharded)
        object.__setattr__(self, "dead_letter_kind", dead_letter_kind)

    @property
    def streams(self) -> tuple[str, ...]:
        return self.names

    @property
    def command(self) -> str:
        """The subscribing command: ``SUBSCRIBE``, ``PSUBSCRIBE`` or ``SSUBSCRIBE``."""
        return "PSUBSCRIBE" if self.pattern else "SSUBSCRIBE" if self.sharded else "SUBSCRIBE"

    def describe(self) -> str:
        """``channel 'news'``, ``patterns 'a.*', 'b.*'``, ``shard channel 'orders'``."""
        kind = "pattern" if self.pattern else "shard channel" if self.sharded else "channel"
        plural = "s" if len(self.names) > 1 else ""
        return f"{kind}{plural} {', '.join(repr(n) for n in self.names)}"

    def arguments(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "sharded": self.sharded,
            "dead_letter_kind": self.dead_letter_kind,
        }

    def with_prefix(self, prefix: str) -> Self:
        if self.pattern:  # the prefix is literal: escape what a glob would read
            prefix = "".join(f"\\{c}" if c in _GLOB_SPECIALS else c for c in prefix)
        return NamedSource.with_prefix(self, prefix)  # (a slots dataclass has no bare super())

    @property
    def dead_letters_to_channel(self) -> bool:
        """``dead_letter="name"`` names a channel (published), not a stream (kept)."""
        return self.dead_letter_kind == "channel"

    def description(self) -> SourceDescription:
        """Read with ``subscribe``, ``psubscribe`` or ``ssubscribe``; dead letters are
        published (``spublish`` for a sharded source) or, with ``dead_letter_kind="stream"``,
        ``xadd``ed."""
        reads = Binding("redis", {"method": self.command.lower()})
        if self.dead_letters_to_channel:
            method = "spublish" if self.sharded else "publish"
            dead_letters = Binding("redis", {"method": method})
        else:
            dead_letters = XADD
        return SourceDescription(system="redis", reads=reads, dead_letters=dead_letters)

    def reads_dead_letter(self, dead_letter: str) -> bool:
        """A dead letter published to a channel these names (or patterns) match comes back
        (``dead_letter_kind="channel"``, on the same bus: ``SPUBLISH`` for a sharded source);
        one appended to a stream does not."""
        return self.in_process().reads_dead_letter(dead_letter)

    def in_process(self) -> MemoryChannel:
        return MemoryChannel(
            self.names,
            pattern=self.pattern,
            sharded=self.sharded,
            dead_letter_to_channel=self.dead_letters_to_channel,
        )
