"""``RedisList``: what a Redis list subscription reads (a work queue), and its keys.

Two forms, one class:

- ``RedisList("jobs")`` — **simple, at-most-once.** Entries are popped (``BLPOP``, or ``BLMPOP
  ... COUNT n`` for a batch): once popped, an entry exists only in the process that popped it.
  **An entry popped by a process that dies is gone.** A retry pushes a copy back; ack and drop
  have nothing to do.
- ``RedisList("jobs", reliable=True)`` — **at-least-once.** Entries are moved (``BLMOVE``) into
  this consumer's processing list and removed from it (``LREM``) when settled; a consumer that
  dies leaves them there, and any live consumer's reaper moves them back to the list once the
  dead one's heartbeat has expired. Nothing is lost; an entry may be handled twice.

The keys a reliable list uses are its companions (:func:`~.companions.companion_key`:
``{jobs}:...`` for ``jobs``; a key with a hash tag keeps it), in the list's hash slot whatever
its name, so every script runs in a cluster too:

- ``{jobs}:processing:<consumer>`` — the entries this consumer holds;
- ``{jobs}:heartbeat:<consumer>`` — a key with a TTL its subscription renews while it lives;
- ``{jobs}:consumers`` — the set of consumer names the reapers look at;
- ``{jobs}:delayed`` — durable ``retry_after`` copies (the shape of :mod:`.delays`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, final

from ..core.description import Binding, SourceDescription
from ..core.errors import ConfigurationError, TrioStreamsError, WrongKeyType
from ..core.sources import NamedSource
from ..core.transport import Sharing, Source, check_source_args
from .companions import companion_key
from .streams import XADD

__all__ = [
    "DEFAULT_HEARTBEAT",
    "ConsumerNameInUse",
    "DeadLetterKind",
    "ListEnd",
    "RedisList",
    "WrongKeyType",
    "consumers_key",
    "heartbeat_key",
    "processing_key",
    "tagged",
]

#: Seconds a reliable consumer's heartbeat lives without renewal: a consumer silent that long
#: is taken for dead, and its processing list is moved back to the list.
DEFAULT_HEARTBEAT = 10.0


class ConsumerNameInUse(TrioStreamsError):
    """Another live consumer of the same reliable list goes by the same ``consumer`` name (its
    heartbeat is renewed by someone else): two processes sharing one processing list would hand
    entries out twice and strand them when one dies. The message names the list and the name."""


class ListEnd(enum.Enum):
    """The end of the list consumers take entries from (publishers push at the other end, so
    the list is first in, first out)."""

    #: ``BLPOP`` / ``BLMOVE ... LEFT``; published with ``RPUSH`` (the default).
    LEFT = "left"
    #: ``BRPOP`` / ``BLMOVE ... RIGHT``; published with ``LPUSH``.
    RIGHT = "right"

    @property
    def word(self) -> str:
        """``LEFT`` or ``RIGHT``, as the commands spell it."""
        return self.value.upper()

    @property
    def push(self) -> str:
        """The command that adds an entry at the far end from this one."""
        return "RPUSH" if self is ListEnd.LEFT else "LPUSH"

    @property
    def push_front(self) -> str:
        """The command that puts an entry back at this end (next to be taken)."""
        return "LPUSH" if self is ListEnd.LEFT else "RPUSH"


class DeadLetterKind(enum.Enum):
    """What ``dead_letter="name"`` names for a list subscription."""

    #: A list: the copy is pushed there, framed like every list entry (the default).
    LIST = "list"
    #: A stream: the copy is ``XADD``ed, as a stream subscription's dead letters are.
    STREAM = "stream"


#: The name this module gave :func:`~.companions.companion_key` before it served streams too.
tagged = companion_key


def processing_key(key: str, consumer: str) -> str:
    """The processing list of ``consumer`` on list ``key``."""
    return companion_key(key, f"processing:{consumer}")


def heartbeat_key(key: str, consumer: str) -> str:
    """The heartbeat of ``consumer`` on list ``key`` (exists while the consumer lives)."""
    return companion_key(key, f"heartbeat:{consumer}")


def attempts_key(key: str, consumer: str) -> str:
    """The attempt ledger of ``consumer`` on list ``key``: handler runs of what its
    processing list holds, by the SHA-1 of each value (:mod:`.list_scripts`)."""
    return companion_key(key, f"attempts:{consumer}")


def consumers_key(key: str) -> str:
    """The set of reliable consumers of list ``key``."""
    return companion_key(key, "consumers")


@final
@dataclass(frozen=True, slots=True, init=False, repr=False)
class RedisList(NamedSource):
    """One Redis list, read as a work queue: each entry goes to one consumer.

    - ``reliable``: False (default) — simple and **at-most-once**: an entry is popped, and an
      entry popped by a process that dies before settling it is **gone**. Use
      ``reliable=True`` when losing an entry matters. True — at-least-once: entries wait in
      this consumer's processing list until settled, and come back to the list if it dies.
    - ``consumer`` (reliable): this consumer's name (default: unique per subscription and
      process: ``host-pid-random-n``). Give a stable
      name and a restart takes back its own processing list first, at once, instead of waiting
      for a reaper.
    - ``pop``: ``"left"`` (default) or ``"right"``: the end consumers take entries from;
      publishing pushes at the other end (``RPUSH`` / ``LPUSH``).
    - ``heartbeat`` (reliable): seconds a consumer's heartbeat key lives; renewed every third of
      it. A consumer silent that long is taken for dead.
    - ``reap_every`` (reliable): seconds between reaper passes (default: half ``heartbeat``).
    - ``dead_letter_kind``: ``"list"`` (default) or ``"stream"``: what the subscription's
      ``dead_letter="name"`` names.

    Under ``app.test()`` it runs as an in-process work queue of the same name, kept apart from
    in-process streams (``TestClient.kill_consumer`` shows a reliable list's crash recovery).
    """

    label = "RedisList"
    shown = (("reliable", False), ("consumer", None), ("pop", ListEnd.LEFT.value))

    key: str
    reliable: bool
    consumer: str | None
    pop: ListEnd
    heartbeat: float
    reap_every: float
    dead_letter_kind: DeadLetterKind

    def __init__(
        self,
        key: str,
        *,
        reliable: bool = False,
        consumer: str | None = None,
        pop: ListEnd | str = ListEnd.LEFT,
        heartbeat: float = DEFAULT_HEARTBEAT,
        reap_every: float | None = None,
        dead_letter_kind: DeadLetterKind | str = DeadLetterKind.LIST,
    ) -> None:
        check_source_args("RedisList", (key,), None)
        if not isinstance(reliable, bool):
            raise ConfigurationError(f"reliable is True or False, not {reliable!r}")
        if consumer is not None:
            if not reliable:
                raise ConfigurationError(
                    f"RedisList({key!r}): a consumer name belongs to a reliable list (it names "
                    "the processing list); a simple list pops entries and keeps nothing"
                )
            if not isinstance(consumer, str) or not consumer:
                raise ConfigurationError(f"consumer must be a non-empty string, not {consumer!r}")
        try:
            end = ListEnd(pop)
        except ValueError:
            raise ConfigurationError(f"pop is 'left' or 'right', not {pop!r}") from None
        try:
            dead = DeadLetterKind(dead_letter_kind)
        except ValueError:
            raise ConfigurationError(
                f"dead_letter_kind is 'list' or 'stream', not {dead_letter_kind!r}"
            ) from None
        for what, value in (("heartbeat", heartbeat), ("reap_every", reap_every)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigurationError(f"{what} takes seconds, not {value!r}")
            if not 0.01 <= value < float("inf"):
                raise ConfigurationError(f"{what} must be at least 0.01 s, got {value!r}")
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "reliable", reliable)
        object.__setattr__(self, "consumer", consumer)
        object.__setattr__(self, "pop", end)
        object.__setattr__(self, "heartbeat", float(heartbeat))
        object.__setattr__(
            self, "reap_every", float(heartbeat) / 2 if reap_every is None else float(reap_every)
        )
        object.__setattr__(self, "dead_letter_kind", dead)

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.key,)

    def arguments(self) -> dict[str, Any]:
        return {
            "reliable": self.reliable,
            "consumer": self.consumer,
            "pop": self.pop.value,
            "heartbeat": self.heartbeat,
            "reap_every": self.reap_every,
            "dead_letter_kind": self.dead_letter_kind,
        }

    @property
    def sharing(self) -> Sharing:
        """A work queue: each entry goes to one consumer, in whichever process."""
        return Sharing.SPLIT

    @property
    def consumer_name(self) -> str | None:
        return self.consumer if self.reliable else None

    def in_process(self) -> Source:
        from ..memory.queues import MemoryList

        return MemoryList(
            self.key, reliable=self.reliable, dead_letter_to_list=self._dead_letters_to_list
        )

    def description(self) -> SourceDescription:
        """Read with ``blmove`` (reliable) or ``blpop``; dead letters are pushed at the far end
        from ``pop`` (or ``xadd``ed, with ``dead_letter_kind="stream"``)."""
        reads = Binding("redis", {"method": "blmove" if self.reliable else "blpop"})
        if self.dead_letter_kind is DeadLetterKind.STREAM:
            dead_letters = XADD
        else:
            dead_letters = Binding("redis", {"method": self.pop.push.lower()})
        return SourceDescription(system="redis", reads=reads, dead_letters=dead_letters)

    def reads_dead_letter(self, dead_letter: str) -> bool:
        """A dead letter pushed onto this very list comes back (``dead_letter_kind="list"``);
        one appended to a stream of the same name cannot (a key has one type)."""
        return self.in_process().reads_dead_letter(dead_letter)

    @property
    def _dead_letters_to_list(self) -> bool:
        return self.dead_letter_kind is DeadLetterKind.LIST
